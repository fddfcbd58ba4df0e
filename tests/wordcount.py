# wordcount.py: split -> map -> merge, each step reading the results of the one before
import sys

from supervisor import Dep
from workers import current_job, job


@job(queue="text")
def split(path: str, parts: int) -> list[str]:
    with open(path) as f:
        words = f.read().split()
    return [" ".join(words[i::parts]) for i in range(parts)]   # one chunk per part


@job(queue="text")
def count(part: int) -> dict:
    chunk = current_job().dependency("split").result[part]      # its edge, by name
    counts: dict[str, int] = {}
    for word in chunk.split():
        counts[word] = counts.get(word, 0) + 1
    return counts


@job(queue="text")
def merge() -> dict:
    total: dict[str, int] = {}
    for dep in current_job().dependencies():   # .id .name .kind .state .result .error
        if dep.ok:                             # a failed count is left out, not fatal
            for word, n in dep.result.items():
                total[word] = total.get(word, 0) + n
    return total


if __name__ == "__main__":
    parts = 4
    first = split.enqueue(path=sys.argv[1], parts=parts)
    counts = count.options(depends_on={"split": first}).enqueue_many(
        [{"part": i} for i in range(parts)])
    last = merge.options(depends_on=[Dep(c, allow_failure=True) for c in counts]).enqueue()
    print(last)                     # later: supervisor.wait(last) -> the merged counts
