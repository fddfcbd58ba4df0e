"""Run as a script by tests/test_tracing_off.py, in a fresh interpreter: enqueue through
every producer API, then run a supervisor in this very process, reporting (as JSON on
stdout) which ``opentelemetry`` modules were loaded after each step.

``--block``: OpenTelemetry cannot be imported at all, as if the extra were not
installed. The remaining arguments go to ``supervisor run``.
"""

import asyncio
import importlib.abc
import sys

import orjson


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--block":
        sys.meta_path.insert(0, _NotInstalled())
        argv = argv[1:]
    from tracing_quiet_handlers import loaded_otel_modules, otel_modules

    import supervisor
    from shared.producers.aio import enqueue_async, enqueue_many_async
    from supervisor.cli import main as cli

    kind = "loaded_otel_modules"
    ids = [supervisor.enqueue(kind, queue="quiet"),
           supervisor.enqueue(kind, queue="quiet", delay=0.001),
           supervisor.enqueue(kind, queue="quiet", unique_key="probe"),
           loaded_otel_modules.enqueue(),
           *supervisor.enqueue_many(kind, [{}, {}], queue="quiet"),
           *loaded_otel_modules.enqueue_many([{}], then=loaded_otel_modules.bind()).ids]

    async def produce() -> list[int]:
        return [await enqueue_async(kind, queue="quiet"),
                *await enqueue_many_async(kind, [{}], queue="quiet")]

    ids += asyncio.run(produce())
    after_enqueue = otel_modules()
    try:
        cli(["run", "--burst", "-n", "1", "-q", "quiet", "--app", "tracing_quiet_handlers",
             *argv], prog_name="supervisor")
    except SystemExit as exc:
        code = exc.code
    print(orjson.dumps({"ids": ids, "after_enqueue": after_enqueue,
                        "after_run": otel_modules(), "code": code}).decode())


if __name__ == "__main__":
    main(sys.argv[1:])
