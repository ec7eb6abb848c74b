"""The execution policy (spark_assign.execution), tested by what it does: a call decides once
whether it is small, a small call keeps what it materializes on the driver and reads its flags
there with no Spark job, its session settings are the caller's unless the session opts in (then
given back), and every path gives the same rows."""

import contextlib

import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

from spark_assign.errors import InvalidOptionError
from spark_assign.execution import (
    SMALL_CALL_CONF,
    SMALL_CALL_SETTINGS,
    call_scope,
    decide_small_call,
    entry_point,
    has_rows,
    materialize,
    materialize_state,
    one_partition,
    partitioned_by,
    rows_within,
    small_call_rows,
    small_call_undecided,
    stored_rows,
    stored_select,
)
from spark_assign.execution.policy import PUSH_DOWN_SEMI_JOINS, SETTINGS_HELD_BY_CONF, SMALL, ExecutionPolicy
from spark_assign.session import SMALL_CALL_SETTINGS_CONF


@contextlib.contextmanager
def _setting(spark, value):
    if value is None:
        spark.conf.unset(SMALL_CALL_CONF)
    else:
        spark.conf.set(SMALL_CALL_CONF, value)
    try:
        yield
    finally:
        spark.conf.unset(SMALL_CALL_CONF)


def _jobs(spark, action):
    """``action()``'s value and how many Spark jobs it ran (classic sessions: read from the
    status tracker, which the listener bus updates)."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    sc._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    before = set(tracker.getJobIdsForGroup(None))
    value = action()
    sc._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    return value, len(set(tracker.getJobIdsForGroup(None)) - before)


@pytest.mark.parametrize("value", ["-1", "many", "1.5"])
def test_small_call_setting_is_checked(spark, value):
    with _setting(spark, value), pytest.raises(InvalidOptionError) as err:
        small_call_rows(spark)
    assert SMALL_CALL_CONF in str(err.value) and repr(value) in str(err.value) and ">= 0" in str(err.value)


def test_small_call_is_decided_once_by_the_outermost_call(spark):
    asked = []

    def bound(rows):
        return lambda: asked.append(rows) or rows

    @entry_point
    def inner(rows):
        return small_call_undecided(spark), decide_small_call(spark, bound(rows))

    @entry_point
    def outer(rows, inner_rows):
        small = decide_small_call(spark, bound(rows))
        return small, inner(inner_rows), decide_small_call(spark, bound(0))

    with _setting(spark, "100"):
        # outside any scope a call is never small, and the bound is not computed
        assert decide_small_call(spark, bound(1)) is False and asked == []
        # an inner call keeps the outer decision without computing its own bound
        assert outer(100, 10**9) == (True, (False, True), True) and asked == [100]
        assert outer(101, 1) == (False, (False, False), False) and asked == [100, 101]
        # a call on its own decides for itself; the decision ends with the call
        assert inner(5) == (True, True) and inner(500) == (True, False)
        assert small_call_undecided(spark) is False and asked == [100, 101, 5, 500]

        @entry_point
        def failing():
            decide_small_call(spark, bound(1))
            raise ValueError("boom")

        with pytest.raises(ValueError):  # a call that fails ends its decision too
            failing()
        assert inner(500) == (True, False) and asked == [100, 101, 5, 500, 1, 500]
    with _setting(spark, "0"):  # never small, decided at once: the bound is not even computed
        assert inner(0) == (False, False) and asked == [100, 101, 5, 500, 1, 500]
    with _setting(spark, None):  # the default
        assert small_call_rows(spark) == 50_000


@pytest.mark.connect
def test_a_small_call_runs_under_its_settings_only_where_the_session_opts_in(spark):
    """A session that opts in (spark.assign.smallCallSettings=true, as the sessions spark-assign
    builds do) runs a small call under the small-call settings from its decision to its end,
    and has its own values back after it, a failing call's too; a session that does not opt in
    keeps its settings throughout; a large call never changes them."""
    keys = sorted(SMALL_CALL_SETTINGS)
    seen = []

    def settings():
        return [spark.conf.get(k, None) for k in keys]

    @entry_point
    def inner():
        seen.append(("inner", settings()))

    @entry_point
    def call(rows, fail=False):
        seen.append(("undecided", settings()))
        small = decide_small_call(spark, lambda: rows)
        seen.append(("decided", settings()))
        rows_out = spark.range(5).where("id % 2 = 0").collect()  # same rows under either settings
        inner()
        if fail:
            raise ValueError("boom")
        return small, [r.id for r in rows_out]

    chosen = [SMALL_CALL_SETTINGS[k] for k in keys]
    opted_in = spark.conf.get(SMALL_CALL_SETTINGS_CONF, None)
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "1234")  # a value of the user's
    try:
        spark.conf.set(SMALL_CALL_SETTINGS_CONF, "true")
        before = settings()
        assert call(10) == (True, [0, 2, 4])
        assert seen == [("undecided", before), ("decided", chosen), ("inner", chosen)] and settings() == before
        assert spark.conf.get(SETTINGS_HELD_BY_CONF, None) is None
        seen.clear()
        with pytest.raises(ValueError):  # a failing call gives the settings back too
            call(10, fail=True)
        assert seen[1] == ("decided", chosen) and settings() == before
        seen.clear()
        assert call(10**6) == (False, [0, 2, 4]) and seen[1] == ("decided", before)  # a large call: untouched
        seen.clear()

        @entry_point
        def outer():  # undecided when it calls: the inner call's decision, and settings, are its own
            inner_result = call(10)
            after_inner = settings()
            return inner_result, after_inner, decide_small_call(spark, lambda: 10**6), settings()

        assert outer() == ((True, [0, 2, 4]), before, False, before) and seen[1] == ("decided", chosen)
        seen.clear()
        for off in (None, "false"):  # a session that does not opt in keeps its settings
            if off is None:
                spark.conf.unset(SMALL_CALL_SETTINGS_CONF)
            else:
                spark.conf.set(SMALL_CALL_SETTINGS_CONF, off)
            assert call(10) == (True, [0, 2, 4]) and [s for _, s in seen] == [before] * 3 and settings() == before
            seen.clear()
    finally:
        if opted_in is None:
            spark.conf.unset(SMALL_CALL_SETTINGS_CONF)
        else:
            spark.conf.set(SMALL_CALL_SETTINGS_CONF, opted_in)
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert spark.conf.get("spark.sql.autoBroadcastJoinThreshold", None) is None


def test_one_small_call_at_a_time_holds_a_sessions_settings(spark):
    """Two small calls on one session (two threads, two policies): the first to decide applies
    the settings and names itself in spark.assign.smallCallSettings.heldBy; the second leaves
    them be and gives nothing back; when the first ends, the session's own values are back."""
    key = "spark.sql.shuffle.partitions"
    own = spark.conf.get(key)
    first, second = ExecutionPolicy(), ExecutionPolicy()
    first.apply_settings(spark)
    try:
        held_by = spark.conf.get(SETTINGS_HELD_BY_CONF, None)
        assert held_by and spark.conf.get(key) == "1"
        second.apply_settings(spark)
        assert second.saved is None and spark.conf.get(SETTINGS_HELD_BY_CONF) == held_by
        second.restore_settings()
        assert spark.conf.get(key) == "1"  # still the first call's
    finally:
        first.restore_settings()
    assert spark.conf.get(key) == own and spark.conf.get(SETTINGS_HELD_BY_CONF, None) is None


def test_has_rows_reads_a_small_calls_stored_rows_without_a_job(spark):
    """has_rows, with or without a column that must not be null or true, or greater than
    another: off the stored rows of a small call's frame, and of a projection of one
    (stored_select), with no Spark job, and with one action on any other frame, the same answers."""
    df = spark.createDataFrame([("g", 1, None, False, None, 1), ("g", 2, None, True, None, 3)],
                               "group_id string, n int, key string, moved boolean, unknown boolean, m int")
    asks = [{}, {"not_null": "key"}, {"not_null": "n"}, {"true": "moved"}, {"true": "unknown"},
            {"greater": ("n", "m")}, {"greater": ("m", "n")}, {"greater": ("m", "m")}]
    with call_scope(spark) as policy:
        assert decide_small_call(spark, lambda: 2) and policy.state == SMALL
        rows, none = materialize(df), materialize(df.limit(0))
        projected = stored_select(rows, "n", "key", "moved", "unknown", "m")

        def answers():
            return [has_rows(rows, **ask) for ask in asks] + [has_rows(none), has_rows(none, true="moved")]

        on_driver, jobs = _jobs(spark, answers)
        assert jobs == 0  # read on the driver
        assert _jobs(spark, lambda: [has_rows(projected, **ask) for ask in asks]) == (on_driver[:len(asks)], 0)
        assert stored_rows(projected).column_names == ["n", "key", "moved", "unknown", "m"]
        assert stored_select(df, "n").columns == ["n"] and stored_rows(stored_select(df, "n")) is None
    assert on_driver == [True, False, True, True, False, False, True, False, False, False]
    assert stored_rows(rows) is None  # the call's rows end with it
    assert [has_rows(df, **ask) for ask in asks] + [has_rows(df.limit(0)), has_rows(df.limit(0), true="moved")] == \
        on_driver


def test_a_limited_read_gives_the_frames_rows_in_order(spark):
    """rows_within reads a frame of several partitions (Python rows, as users and tests make
    them) with its rows in the frame's order, and says None when it has more rows than asked for."""
    rows = [(f"m{i}", i) for i in range(40)]
    df = spark.createDataFrame(rows, "member_id string, n int")
    assert df.rdd.getNumPartitions() == 2  # one per core of local[2]
    table = rows_within(df, 40)
    assert list(zip(table["member_id"].to_pylist(), table["n"].to_pylist())) == rows
    assert rows_within(df, 39) is None and rows_within(df, -1) is None


@pytest.mark.parametrize("cut", [True, False])
def test_a_small_calls_joins_of_joins_give_the_large_calls_rows(spark, cut):
    """A join of joins of stored frames, its first join put into one partition or not
    (one_partition), stored in a small call and in a large one: the same rows; outside a
    small call one_partition leaves a frame as it is."""
    members = spark.createDataFrame([("g", f"m{i}", i % 3) for i in range(9)], "group_id string, member_id string, k int")
    loads = spark.createDataFrame([("g", f"m{i}", i) for i in range(9)], "group_id string, member_id string, load int")
    weights = spark.createDataFrame([(k, 10 ** k) for k in range(3)], "k int, weight int")
    assert one_partition(members) is members  # not in a small call

    @entry_point
    def call(rows):
        decide_small_call(spark, lambda: rows)
        m, x, w = materialize(members), materialize(loads), materialize(weights)
        first = m.join(x, ["group_id", "member_id"])
        weighted = (one_partition(first) if cut else first).join(w, "k")
        per_k = materialize(weighted.groupBy("k").agg(F.sum(F.col("load") * F.col("weight")).alias("load")))
        return stored_rows(per_k) is not None, sorted(tuple(r) for r in per_k.collect())

    assert call(18) == (True, [(0, 9), (1, 120), (2, 1500)])
    assert call(10**6) == (False, [(0, 9), (1, 120), (2, 1500)])


@pytest.mark.connect
def test_a_small_call_materializes_local_relations(spark):
    """A small call's materialized frames hold the same rows and schema as their source,
    readable on the driver while the call runs; aggregations, windows and joins over
    them give the large call's rows. A large call's are checkpoints, with no rows on the driver."""
    df = spark.createDataFrame([("g", i % 3, [i]) for i in range(20)], "group_id string, n int, xs array<int>")
    df = df.groupBy("group_id", "n").count()  # a shuffle: the plan is no local relation by itself

    @entry_point
    def call(rows):
        decide_small_call(spark, lambda: rows)
        small, state = materialize(df), materialize_state(df)
        by_group = partitioned_by(df, "group_id", rows=lambda: 20)
        totals = small.groupBy("group_id").agg(F.sum("count").alias("total"))
        ranked = state.withColumn("rank", F.row_number().over(Window.partitionBy("group_id").orderBy("n")))
        combined = sorted((r.n, r.rank, r.total) for r in totals.join(ranked, "group_id").collect())
        on_driver = [stored_rows(x) for x in (small, state, small.where("n > 0"))]
        return (small.schema, sorted(small.collect()), sorted(state.collect()), sorted(by_group.collect()),
                combined, on_driver)

    schema, small, state, by_group, combined, on_driver = call(10)
    assert schema == df.schema and small == state == by_group == sorted(df.collect())
    assert combined == [(0, 1, 20), (1, 2, 20), (2, 3, 20)]
    assert sorted(on_driver[0].to_pylist(), key=str) == sorted((r.asDict() for r in df.collect()), key=str)
    assert on_driver[1] is not None and on_driver[2] is None  # a frame derived from one is not stored
    large = call(10**6)  # over the default bound: the session's materialization policy
    assert large[:5] == (schema, small, state, by_group, combined) and large[5] == [None, None, None]


@pytest.mark.connect
def test_a_small_calls_semi_joins_give_the_large_calls_rows_and_keep_the_users_rule_exclusions(spark):
    """Semi and anti joins of a small call's stored frames, and a join of those with a frame it
    did not store: the large call's rows. Under the small-call settings the optimizer rule that
    pushes semi joins below a coalesce is excluded next to the session's own exclusions, which
    are back as they were when the call ends."""
    left = spark.createDataFrame([("g", i % 3, i) for i in range(12)], "group_id string, n int, p int")
    right = spark.createDataFrame([("g", 1), ("g", 2)], "group_id string, n int")
    excluded = "org.apache.spark.sql.catalyst.optimizer.ConstantFolding"  # a rule of the user's, kept

    @entry_point
    def call(rows):
        decide_small_call(spark, lambda: rows)
        a, b = materialize(left), materialize(right)
        kept = a.join(b, ["group_id", "n"], "left_semi").groupBy("n").agg(F.sum("p").alias("total"))
        dropped = a.join(b, ["group_id", "n"], "left_anti").groupBy("n").agg(F.sum("p").alias("total"))
        numbers = spark.range(4).select(F.col("id").cast("int").alias("n"))  # two partitions, not stored
        both = kept.unionByName(dropped).join(numbers, "n")
        return sorted(tuple(r) for r in both.collect()), spark.conf.get("spark.sql.optimizer.excludedRules", None)

    opted_in = spark.conf.get(SMALL_CALL_SETTINGS_CONF, None)
    spark.conf.set(SMALL_CALL_SETTINGS_CONF, "true")
    spark.conf.set("spark.sql.optimizer.excludedRules", excluded)
    try:
        rows, rules = call(10)
        assert rows == [(0, 18), (1, 22), (2, 26)]  # 0+3+6+9, 1+4+7+10, 2+5+8+11
        assert rules == f"{excluded},{PUSH_DOWN_SEMI_JOINS}"
        assert spark.conf.get("spark.sql.optimizer.excludedRules") == excluded  # given back
        assert call(10**6) == (rows, excluded)  # a large call: the session's settings
    finally:
        spark.conf.unset("spark.sql.optimizer.excludedRules")
        spark.conf.set(SMALL_CALL_SETTINGS_CONF, opted_in) if opted_in else spark.conf.unset(SMALL_CALL_SETTINGS_CONF)


@pytest.mark.connect
@pytest.mark.parametrize("strategy", ["range", "sticky", "cooperative-sticky"])
def test_assign_decides_from_its_inputs_rows_and_gives_the_same_rows(spark, strategy):
    from chispa import assert_df_equality

    from spark_assign import assign

    members = spark.createDataFrame(
        [("g1", "c0", ["t0", "t1"], [("t0", 0), ("t0", 1), ("t1", 0)], 1), ("g1", "c1", ["t0", "t1"], [], -1),
         ("g2", "d0", ["t0"], [], -1), ("g2", "d1", ["t1"], [("t1", 2)], 3)],
        "group_id string, member_id string, topics array<string>, "
        "owned array<struct<topic:string,partition:int>>, generation int")
    parts = spark.createDataFrame([(t, p) for t in ("t0", "t1") for p in range(4)], "topic string, partition int")

    def call(**kwargs):
        with call_scope(spark) as policy:  # the decision assign() takes, read off its policy
            rows = assign(members, parts, strategy, **kwargs).orderBy("group_id", "topic", "partition").collect()
            return policy.decisions, rows

    session_settings = [spark.conf.get(k, None) for k in SMALL_CALL_SETTINGS]
    with _setting(spark, None):  # 6 subscriptions + 2 groups x 8 partitions = 22 rows
        small, small_rows = call()
        assert small == ["small"]
        assert [spark.conf.get(k, None) for k in SMALL_CALL_SETTINGS] == session_settings  # given back
        assert call(validate=False)[0] == []  # no validation: nothing decides
    with _setting(spark, "21"):
        large, large_rows = call()
        assert large == ["large"]
    with _setting(spark, "22"):
        assert call()[0] == ["small"]
    schema = "group_id string, member_id string, topic string, partition int"
    assert_df_equality(spark.createDataFrame(small_rows, schema), spark.createDataFrame(large_rows, schema))
    # every partition of both groups once (no owned partition moves, so cooperative withholds nothing)
    assert sorted((r.group_id, r.topic, r.partition) for r in small_rows) == [
        (g, t, p) for g in ("g1", "g2") for t in ("t0", "t1") for p in range(4)]


@pytest.mark.parametrize("short_owned", [32, 2])
def test_a_small_call_with_a_long_owned_list_gives_the_same_rows(spark, short_owned, monkeypatch):
    # the first read brings the members' rows, each owned list of at most SHORT_OWNED claims
    # whole; a longer list (3 claims against a bound of 2) has the members read again, whole
    import spark_assign.execution.small_inputs as small_inputs
    from spark_assign import assign

    members = spark.createDataFrame(
        [("g1", "c0", ["t0"], [("t0", 0), ("t0", 1), ("t0", 2)], 1), ("g1", "c1", ["t0"], [("t0", 3)], 1),
         ("g1", "c2", ["t0"], None, -1)],
        "group_id string, member_id string, topics array<string>, "
        "owned array<struct<topic:string,partition:int>>, generation int")
    parts = spark.createDataFrame([("t0", p) for p in range(6)], "topic string, partition int")
    monkeypatch.setattr(small_inputs, "SHORT_OWNED", short_owned)
    with call_scope(spark) as policy:
        rows = sorted(tuple(r) for r in assign(members, parts, "sticky").collect())
        assert policy.decisions == ["small"]
    # c0 keeps 2 of its 3 (quota 2), c1 keeps t0-3, c2 takes the rest
    assert rows == [("g1", "c0", "t0", 0), ("g1", "c0", "t0", 1), ("g1", "c1", "t0", 2), ("g1", "c1", "t0", 3),
                    ("g1", "c2", "t0", 4), ("g1", "c2", "t0", 5)]


@pytest.mark.parametrize("kinds", [
    [],
    [("g1", True, False, False)],
    [("g1", True, True, True), ("g2", False, False, True)],
    [("g1", None, True, True), ("g2", False, True, False), ("g3", True, None, None)],
])
def test_flags_read_off_stored_rows_equal_the_aggregation(spark, kinds):
    # a small call reads the sticky assignment's path flags off the rows it stored; any
    # other call aggregates them in Spark: the same flags, nulls and no rows included
    from spark_assign.strategies.sticky import group_paths

    df = spark.createDataFrame(kinds, "group_id string, _uniform boolean, _racks boolean, _claims boolean")

    @entry_point
    def from_stored_rows():
        decide_small_call(spark, lambda: 1)
        stored = materialize(df)
        assert stored_rows(stored) is not None
        return group_paths(stored)

    assert stored_rows(df) is None
    assert from_stored_rows() == group_paths(df)


OWNED = "array<struct<topic:string,partition:int>>"
MEMBERS = f"group_id string, member_id string, topics array<string>, owned {OWNED}"


@pytest.mark.parametrize("members, partitions", [
    ([("g", "a", ["t"], [("t", 0)]), ("g", "b", ["t"], None), ("h", "a", ["t"], [])], [("t", 0), ("t", 1)]),
    ([("g", "a", ["t"], [("", 0), ("gone", 7)])], [("t", 0)]),  # claims Kafka ignores: not a problem
    ([("g", None, ["t"], None)], [("t", 0)]),
    ([("g", "a", None, None)], [("t", 0)]),
    ([("", "a", ["t"], None)], [("t", 0)]),
    ([("g", "a", ["t"], None), ("g", "a", ["u"], None)], [("t", 0)]),
    ([("g", "a", ["t"], [None])], [("t", 0)]),
    ([("g", "a", ["t"], [("t", None)])], [("t", 0)]),
    ([("g", "a", ["t"], [(None, 0)])], [("t", 0)]),
    ([("g", "a", ["t"], [("t", 0), ("t", -1)])], [("t", 0)]),
    ([("g", "a", ["t"], None)], [("t", None)]),
    ([("g", "a", ["t"], None)], [(None, 0)]),
    ([("g", "a", ["t"], None)], [("t", -2), ("t", 0)]),
    ([("g", "a", ["t"], None)], [("t", 0), ("t", 1), ("t", 0)]),
    ([], [("t", 0)]),
])
def test_a_small_calls_driver_rows_pass_exactly_what_the_spark_checks_pass(spark, members, partitions):
    import spark_assign.inputs as inputs
    from spark_assign.errors import InvalidInputError
    from spark_assign.execution import local_relation
    from spark_assign.execution.small_inputs import clean_on_driver, decide_small_inputs

    m = inputs.normalize_members(spark.createDataFrame(members, MEMBERS))
    p = inputs.normalize_partitions(spark.createDataFrame(partitions, "topic string, partition int"))
    try:
        inputs.validate_inputs(m, p)  # outside a small call: the Spark checks
        spark_passes = True
    except InvalidInputError:
        spark_passes = False
    with call_scope(spark):
        on_driver = clean_on_driver(local_relation(m), local_relation(p))
    # never passes what Spark flags; passes every valid input with members
    assert on_driver == (spark_passes and bool(members))

    # a small call over valid inputs validates them with no Spark job; a large one takes some
    if spark_passes and members:
        for rows in (None, "0"):
            with _setting(spark, rows), call_scope(spark):
                sm, sp = decide_small_inputs(m, p) if rows is None else (m, p)
                assert (_jobs(spark, lambda: inputs.validate_inputs(sm, sp))[1] == 0) == (rows is None)


def _clean_and_mixed_groups(spark):
    """Members and partitions of two small groups: ``g`` (uniform subscriptions, owning their
    partitions, one joiner) and ``mixed`` (different subscriptions), over topics t0 and t1."""
    owned = "owned array<struct<topic:string,partition:int>>"
    members = spark.createDataFrame(
        [("g", f"c{i}", ["t0", "t1"], [("t0", i), ("t1", i)], 1) for i in range(4)] + [("g", "c9", ["t0", "t1"], [], 1)]
        + [("mixed", "a", ["t0"], [("t0", 0)], 1), ("mixed", "b", ["t0", "t1"], [("t1", 0)], 1),
           ("mixed", "c", ["t1"], [], 1)],
        f"group_id string, member_id string, topics array<string>, {owned}, generation int")
    return members, spark.createDataFrame([(t, p) for t in ("t0", "t1") for p in range(10)],
                                          "topic string, partition int")


def test_a_small_calls_result_runs_as_one_job_under_the_sessions_settings(spark):
    """A small call's result is run by its caller after the call has given the session's
    settings back (automatic broadcasts on). Range's and roundrobin's last join is hinted and
    their plans are returned as they are; the sticky family's, lag-aware's and uniform's plans
    join what the call stored, so the call stores its result (small_call_result). Either way
    running the result is one Spark job, for a clean group and for a group of mixed
    subscriptions; the rows are those of a new call run with broadcasts off. A call inside
    another small call returns the same rows."""
    from spark_assign import assign

    members, partitions = _clean_and_mixed_groups(spark)
    assert spark.conf.get("spark.sql.autoBroadcastJoinThreshold") != "-1"
    everything = sorted((g, t, p) for g in ("g", "mixed") for t in ("t0", "t1") for p in range(10))
    for strategy in ("range", "roundrobin", "sticky", "cooperative-sticky", "lag-aware"):
        result = assign(members, partitions, strategy)
        rows, jobs = _jobs(spark, lambda: sorted(result.collect()))
        assert jobs == 1, strategy
        # every partition once, and the same rows as a new call's plan with broadcasts off
        assert sorted((r.group_id, r.topic, r.partition) for r in rows) == everything, strategy
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
        try:
            assert sorted(assign(members, partitions, strategy).collect()) == rows, strategy
        finally:
            spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")

    @entry_point
    def outer():
        decide_small_call(spark, lambda: 1)
        return sorted(assign(members, partitions, "sticky").collect())

    assert outer() == sorted(assign(members, partitions, "sticky").collect())


def test_a_rack_aware_small_call_reads_its_flags_on_the_driver(spark):
    """A rack-aware cooperative-sticky call (KIP-881) on a small group with a claim two members
    make at the same generation (so the per-partition route drops one of them) runs no more
    Spark jobs than its stores and its result: no broadcast's, and its flags (is any member on a
    rack, is any claim dropped) are read off stored rows. The result is the large call's."""
    from spark_assign import assign

    owned = "owned array<struct<topic:string,partition:int>>"
    members = spark.createDataFrame(
        [("g", "a", "r1", ["t"], [("t", 0), ("t", 1)], 3), ("g", "b", "r2", ["t"], [("t", 1), ("t", 2)], 3),
         ("g", "c", "r1", ["t"], [], 3)],
        f"group_id string, member_id string, rack string, topics array<string>, {owned}, generation int")
    partitions = spark.createDataFrame([("t", p, [f"r{1 + p % 2}"]) for p in range(6)],
                                       "topic string, partition int, racks array<string>")
    rows, jobs = _jobs(spark, lambda: sorted(assign(members, partitions, "cooperative-sticky").collect()))
    # its stores and its result: a broadcast or a flag read by an action adds one
    assert 0 < jobs <= 12, jobs
    with _setting(spark, "0"):  # no call is small: the session's path
        assert sorted(assign(members, partitions, "cooperative-sticky").collect()) == rows
    # cooperative: a partition changing owner is only revoked in this rebalance
    assert len({(r.topic, r.partition) for r in rows}) == len(rows) >= 4, rows


@pytest.mark.connect
def test_check_assignment_decides_a_small_call_from_its_inputs_and_finds_the_same_problems(spark):
    """check_assignment() over small inputs decides a small call from them (the members, the
    partitions and the assignment read to the driver) and finds exactly the problem rows the
    checks find on Spark's own partitions; a good assignment passes, read the same way."""
    from spark_assign import AssignmentPropertyError, check_assignment

    member_rows = [  # one group per broken property, and one that holds them all
        ("twice", "a", ["t0"], None, None), ("twice", "b", ["t0"], None, None),
        ("unsubscribed", "a", ["t0"], None, None), ("unsubscribed", "b", ["t1"], None, None),
        ("unassigned", "a", ["t0"], None, None),
        ("skewed", "a", ["t1"], None, None), ("skewed", "b", ["t1"], None, None),
        ("handed_over", "a", ["t1"], [("t1", 0)], 4), ("handed_over", "b", ["t1"], None, None),
        ("good", "a", ["t0", "t1"], None, None), ("good", "b", ["t0", "t1"], None, None),
    ]
    members = spark.createDataFrame(member_rows, "group_id string, member_id string, topics array<string>, "
                                                 "owned array<struct<topic:string,partition:int>>, generation int")
    parts = spark.createDataFrame([("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1), ("t1", 2)], "topic string, partition int")
    a = spark.createDataFrame([
        ("twice", "a", "t0", 0), ("twice", "b", "t0", 0), ("twice", "b", "t0", 1),
        ("unsubscribed", "a", "t0", 0), ("unsubscribed", "a", "t0", 1), ("unsubscribed", "a", "t1", 0),
        ("unsubscribed", "b", "t1", 1), ("unsubscribed", "b", "t1", 2), ("unassigned", "a", "t0", 0),
        ("skewed", "a", "t1", 0), ("skewed", "a", "t1", 1), ("skewed", "a", "t1", 2),
        ("handed_over", "a", "t1", 1), ("handed_over", "b", "t1", 0), ("handed_over", "b", "t1", 2),
        ("good", "a", "t0", 0), ("good", "a", "t1", 0), ("good", "a", "t1", 1),
        ("good", "b", "t0", 1), ("good", "b", "t1", 2),
    ], "group_id string, member_id string, topic string, partition int")

    def problems(**kwargs):
        with call_scope(spark) as policy, pytest.raises(AssignmentPropertyError) as raised:
            check_assignment(a.where("group_id != 'good'"), members.where("group_id != 'good'"), parts, **kwargs)
        return str(raised.value).splitlines()[0], sorted(map(str, raised.value.rows)), policy.decisions

    found = {}
    for setting in (None, "0"):  # small (the default bound), then never small
        with _setting(spark, setting):
            found[setting] = problems(balance="kafka"), problems(cooperative=True)
    good = a.where("group_id = 'good'")
    with call_scope(spark) as policy:
        assert check_assignment(good, members.where("group_id = 'good'"), parts) is good
        assert policy.decisions == ["small"]
    assert [f[2] for f in found["0"]] == [["large"]] * 2 and [f[2] for f in found[None]] == [["small"]] * 2
    (kafka, kafka_rows, _), (cooperative, cooperative_rows, _) = found[None]
    assert (kafka, kafka_rows, cooperative, cooperative_rows) == (*found["0"][0][:2], *found["0"][1][:2])
    assert kafka == "assignment breaks property checks: 4 problem row(s):"
    assert [r.split("'")[3] for r in kafka_rows] == ["skewed", "twice", "unassigned", "unsubscribed"]
    assert "two or more fewer" in kafka_rows[0] and "more than once" in kafka_rows[1]  # skewed: a holds 3, b none
    assert "'unassigned'" in kafka_rows[2] and "not subscribed" in kafka_rows[3]
    assert cooperative.startswith("assignment breaks property checks:")
    assert any("held by a" in r and "handed_over" in r for r in cooperative_rows)


@pytest.mark.connect
def test_a_session_that_does_not_opt_in_gets_the_same_rows(spark):
    """The small-call path under the session's own settings (a caller's session that does not
    opt in: adaptive execution, automatic broadcasts, several shuffle partitions) gives every
    strategy's rows, and a cooperative rebalance's, as the tuned path does, and
    leaves every setting of the session as it found it."""
    from spark_assign import assign, rebalance
    from spark_assign.strategies.registry import STRATEGIES

    members, partitions = _clean_and_mixed_groups(spark)
    lags = spark.createDataFrame([(g, t, p, (p * 37) % 11) for g in ("g", "mixed") for t in ("t0", "t1") for p in range(10)],
                                 "group_id string, topic string, partition int, lag long")

    def run():
        rows = {name: sorted(tuple(r) for r in assign(members, partitions, name, lags=lags).collect())
                for name in sorted(STRATEGIES)}
        r = rebalance(members, partitions, strategy="cooperative-sticky")
        rows["rebalance"] = sorted(tuple(x) for x in r.final.collect()) + sorted(
            (x.group_id, x.round, x.moved) for x in r.summary.collect())
        return rows

    opted_in = spark.conf.get(SMALL_CALL_SETTINGS_CONF, None)
    spark.conf.unset(SMALL_CALL_SETTINGS_CONF)
    try:
        keys = sorted(SMALL_CALL_SETTINGS)
        own = [spark.conf.get(k, None) for k in keys]
        untuned = run()
        assert [spark.conf.get(k, None) for k in keys] == own
    finally:
        if opted_in is not None:
            spark.conf.set(SMALL_CALL_SETTINGS_CONF, opted_in)
    assert untuned == run()
