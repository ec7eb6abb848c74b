"""Small calls (spark_assign.lineage): the decision, its setting, and what a small call
materializes."""

import contextlib
import io

import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

from spark_assign.errors import InvalidOptionError
from spark_assign.frames import one_partition
from spark_assign.lineage import (
    PUSH_DOWN_SEMI_JOINS,
    SMALL_CALL_CONF,
    SMALL_CALL_SETTINGS,
    SMALL_CALL_SETTINGS_CONF,
    decide_small_call,
    has_rows,
    materialize,
    materialize_state,
    partitioned_by,
    rows_within,
    small_call_rows,
    small_call_scope,
    small_call_undecided,
    stored_rows,
    stored_select,
)


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


def _plan(df) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain()
    return out.getvalue()


def _stages_per_job(spark, action):
    """``action()``'s value and the number of stages of each Spark job it ran (classic
    sessions: read from the status tracker, which the listener bus updates)."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    sc._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    before = set(tracker.getJobIdsForGroup(None))
    value = action()
    sc._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    return value, [len(tracker.getJobInfo(j).stageIds) for j in sorted(set(tracker.getJobIdsForGroup(None)) - before)]


@pytest.mark.parametrize("value", ["-1", "many", "1.5"])
def test_small_call_setting_is_checked(spark, value):
    with _setting(spark, value), pytest.raises(InvalidOptionError) as err:
        small_call_rows(spark)
    assert SMALL_CALL_CONF in str(err.value) and repr(value) in str(err.value) and ">= 0" in str(err.value)


def test_small_call_is_decided_once_by_the_outermost_call(spark):
    asked = []

    def bound(rows):
        return lambda: asked.append(rows) or rows

    @small_call_scope
    def inner(rows):
        return small_call_undecided(spark), decide_small_call(spark, bound(rows))

    @small_call_scope
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

        @small_call_scope
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
def test_a_small_call_runs_under_its_settings_and_gives_the_session_back(spark):
    keys = sorted(SMALL_CALL_SETTINGS)
    seen = []

    def settings():
        return [spark.conf.get(k, None) for k in keys]

    @small_call_scope
    def inner():
        seen.append(("inner", settings()))

    @small_call_scope
    def call(rows, fail=False):
        seen.append(("undecided", settings()))
        small = decide_small_call(spark, lambda: rows)
        seen.append(("decided", settings()))
        rows_out = spark.range(5).where("id % 2 = 0").collect()  # runs interpreted, same rows
        inner()
        if fail:
            raise ValueError("boom")
        return small, [r.id for r in rows_out]

    chosen = [SMALL_CALL_SETTINGS[k] for k in keys]
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "1234")  # a value of the user's
    try:
        before = settings()
        assert call(10) == (True, [0, 2, 4])
        assert seen == [("undecided", before), ("decided", chosen), ("inner", chosen)] and settings() == before
        seen.clear()
        with pytest.raises(ValueError):  # a failing call gives the settings back too
            call(10, fail=True)
        assert seen[1] == ("decided", chosen) and settings() == before
        seen.clear()
        assert call(10**6) == (False, [0, 2, 4]) and seen[1] == ("decided", before)  # a large call: untouched
        seen.clear()

        @small_call_scope
        def outer():  # undecided when it calls: the inner call's decision, and settings, are its own
            inner_result = call(10)
            after_inner = settings()
            return inner_result, after_inner, decide_small_call(spark, lambda: 10**6), settings()

        assert outer() == ((True, [0, 2, 4]), before, False, before) and seen[1] == ("decided", chosen)

        @small_call_scope
        def twice():  # two calls that decide small, then one that decides large, in one undecided call
            return call(10), call(10), settings(), decide_small_call(spark, lambda: 10), settings()

        assert twice() == ((True, [0, 2, 4]), (True, [0, 2, 4]), before, True, chosen) and settings() == before
        seen.clear()
        spark.conf.set(SMALL_CALL_SETTINGS_CONF, "false")  # the user keeps the session's settings
        assert call(10) == (True, [0, 2, 4]) and seen[1] == ("decided", before)
    finally:
        spark.conf.unset(SMALL_CALL_SETTINGS_CONF)
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert spark.conf.get("spark.sql.autoBroadcastJoinThreshold", None) is None


def test_has_rows_reads_a_small_calls_stored_rows_without_a_job(spark):
    """has_rows, with or without a column that must not be null or true, or greater than
    another: off the stored rows of a small call's frame, and of a projection of one
    (stored_select), with no Spark job, and with one action on any other frame, the same answers."""
    df = spark.createDataFrame([("g", 1, None, False, None, 1), ("g", 2, None, True, None, 3)],
                               "group_id string, n int, key string, moved boolean, unknown boolean, m int")
    tracker = spark.sparkContext.statusTracker()

    @small_call_scope
    def stored():
        decide_small_call(spark, lambda: 2)
        return materialize(df), materialize(df.limit(0))

    rows, none = stored()
    projected = stored_select(rows, "n", "key", "moved", "unknown", "m")
    before = max(tracker.getJobIdsForGroup(None), default=-1)
    asks = [{}, {"not_null": "key"}, {"not_null": "n"}, {"true": "moved"}, {"true": "unknown"},
            {"greater": ("n", "m")}, {"greater": ("m", "n")}, {"greater": ("m", "m")}]
    answers = [has_rows(rows, **ask) for ask in asks] + [has_rows(none), has_rows(none, true="moved")]
    assert [has_rows(projected, **ask) for ask in asks] == answers[:len(asks)]
    assert max(tracker.getJobIdsForGroup(None), default=-1) == before  # read on the driver
    assert answers == [True, False, True, True, False, False, True, False, False, False]
    assert stored_rows(projected).column_names == ["n", "key", "moved", "unknown", "m"]
    assert stored_select(df, "n").columns == ["n"] and stored_rows(stored_select(df, "n")) is None
    assert [has_rows(df, **ask) for ask in asks] + [has_rows(df.limit(0)), has_rows(df.limit(0), true="moved")] == answers


def test_a_limited_read_is_one_stage_in_the_frames_order(spark):
    """rows_within reads a frame of several partitions (Python rows, as users and tests make
    them) in one job of one stage, with its rows in the frame's order, and says None when
    it has more rows than asked for."""
    rows = [(f"m{i}", i) for i in range(40)]
    df = spark.createDataFrame(rows, "member_id string, n int")
    assert df.rdd.getNumPartitions() == 2  # one per core of local[2]
    table, stages = _stages_per_job(spark, lambda: rows_within(df, 40))
    assert stages == [1]  # a limit over two partitions would shuffle their first rows into one
    assert list(zip(table["member_id"].to_pylist(), table["n"].to_pylist())) == rows
    assert _stages_per_job(spark, lambda: rows_within(df, 39)) == (None, [1])


def test_a_small_calls_store_is_one_job_with_its_shuffles_as_stages(spark):
    """Inside a small call a store runs without adaptive execution: a plan that shuffles (a join
    of two local relations, then a join of that on another key, whose sides Spark shuffles) is one
    Spark job whose shuffles are stages of it, where adaptive execution runs each shuffle stage as
    a job of its own; the session's setting is back once the call ends."""
    members = spark.createDataFrame([("g", f"m{i}", i % 3) for i in range(9)], "group_id string, member_id string, k int")
    loads = spark.createDataFrame([("g", f"m{i}", i) for i in range(9)], "group_id string, member_id string, load int")
    weights = spark.createDataFrame([(k, 10 ** k) for k in range(3)], "k int, weight int")

    @small_call_scope
    def call():
        decide_small_call(spark, lambda: 18)
        m, x, w = materialize(members), materialize(loads), materialize(weights)
        weighted = m.join(x, ["group_id", "member_id"]).join(w, "k")
        per_k = weighted.groupBy("k").agg(F.sum(F.col("load") * F.col("weight")).alias("load"))
        stored, stages = _stages_per_job(spark, lambda: materialize(per_k))
        return stored_rows(stored), stages

    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    rows, stages = call()
    assert len(stages) == 1 and stages[0] >= 2, stages
    assert sorted(zip(rows["k"].to_pylist(), rows["load"].to_pylist())) == [(0, 9), (1, 120), (2, 1500)]
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"


def test_a_small_calls_joins_of_joins_shuffle_nothing_through_one_partition(spark):
    """The join of joins above, its first join put into one partition (frames.one_partition):
    one Spark job of one stage, with the same rows; outside a small call one_partition leaves
    a frame as it is. Without it, Spark shuffles both sides of every join after the first: a
    sort-merge join of two one-partition sides is planned as either side's partitioning, not
    as one partition, and joins skip their shuffles only for sides planned as one partition."""
    members = spark.createDataFrame([("g", f"m{i}", i % 3) for i in range(9)], "group_id string, member_id string, k int")
    loads = spark.createDataFrame([("g", f"m{i}", i) for i in range(9)], "group_id string, member_id string, load int")
    weights = spark.createDataFrame([(k, 10 ** k) for k in range(3)], "k int, weight int")
    assert one_partition(members) is members  # not in a small call

    @small_call_scope
    def call(cut: bool):
        decide_small_call(spark, lambda: 18)
        m, x, w = materialize(members), materialize(loads), materialize(weights)
        first = m.join(x, ["group_id", "member_id"])
        weighted = (one_partition(first) if cut else first).join(w, "k")
        per_k = weighted.groupBy("k").agg(F.sum(F.col("load") * F.col("weight")).alias("load"))
        stored, stages = _stages_per_job(spark, lambda: materialize(per_k))
        return sorted(zip(stored_rows(stored)["k"].to_pylist(), stored_rows(stored)["load"].to_pylist())), stages

    (rows, stages), (rows_shuffled, stages_shuffled) = call(True), call(False)
    assert stages == [1] and stages_shuffled[0] >= 2, (stages, stages_shuffled)
    assert rows == rows_shuffled == [(0, 9), (1, 120), (2, 1500)]


@pytest.mark.connect
def test_a_small_call_materializes_local_relations(spark):
    df = spark.createDataFrame([("g", i % 3, [i]) for i in range(20)], "group_id string, n int, xs array<int>")
    df = df.groupBy("group_id", "n").count()  # a shuffle: the plan is no local relation by itself

    @small_call_scope
    def call(rows):
        decide_small_call(spark, lambda: rows)
        return materialize(df), materialize_state(df)

    @small_call_scope
    def by_group(rows):
        decide_small_call(spark, lambda: rows)
        return partitioned_by(df, "group_id")

    small, state = call(10)
    # a small call's rows go into one partition, with no shuffle; a large call's are shuffled
    assert "Coalesce 1" in _plan(by_group(10)) and "REPARTITION_BY_COL" not in _plan(by_group(10))
    assert "REPARTITION_BY_COL" in _plan(by_group(10**6)) and "REPARTITION_BY_COL" not in _plan(df)
    assert all("LocalTableScan" in _plan(x) and "Exchange" not in _plan(x) for x in (small, state))
    # one partition: an aggregation and a window over local relations shuffle nothing, nor
    # does a join of two of them that is not broadcast
    totals = small.groupBy("group_id").agg(F.sum("count").alias("total"))
    ranked = state.withColumn("rank", F.row_number().over(Window.partitionBy("group_id").orderBy("n")))
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        combined = totals.join(ranked, "group_id")
        assert "Exchange" not in _plan(combined) and "BroadcastHashJoin" not in _plan(combined)
        assert sorted((r.n, r.rank, r.total) for r in combined.collect()) == [(0, 1, 20), (1, 2, 20), (2, 3, 20)]
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert sorted(small.collect()) == sorted(state.collect()) == sorted(df.collect())
    assert small.schema == df.schema
    # their rows stay on the driver, readable with no action; no other frame has any
    assert sorted(stored_rows(small).to_pylist(), key=str) == sorted((r.asDict() for r in df.collect()), key=str)
    assert stored_rows(df) is None and stored_rows(small.where("n > 0")) is None
    large, large_state = call(10**6)  # over the default bound: the session's materialization policy
    assert all("LocalTableScan" not in _plan(x) for x in (large, large_state))
    assert stored_rows(large) is None and stored_rows(large_state) is None
    assert sorted(large.collect()) == sorted(df.collect())


@pytest.mark.connect
def test_a_small_calls_semi_joins_of_local_relations_shuffle_nothing(spark):
    """Under the small-call settings a semi or anti join stays above the local relation's
    single-partition coalesce, and a frame that is not stored is shuffled once, into one
    partition, not the local relations too to match it."""
    left = spark.createDataFrame([("g", i % 3, i) for i in range(12)], "group_id string, n int, p int")
    right = spark.createDataFrame([("g", 1), ("g", 2)], "group_id string, n int")
    excluded = "org.apache.spark.sql.catalyst.optimizer.ConstantFolding"  # a rule of the user's, kept

    @small_call_scope
    def call(rows):
        decide_small_call(spark, lambda: rows)
        a, b = materialize(left), materialize(right)
        kept = a.join(b, ["group_id", "n"], "left_semi").groupBy("n").agg(F.sum("p").alias("total"))
        dropped = a.join(b, ["group_id", "n"], "left_anti").groupBy("n").agg(F.sum("p").alias("total"))
        numbers = spark.range(4).select(F.col("id").cast("int").alias("n"))  # two partitions, not stored
        both = kept.unionByName(dropped).join(numbers, "n")
        return (_plan(kept), _plan(dropped), _plan(both), sorted(tuple(r) for r in both.collect()),
                spark.conf.get("spark.sql.optimizer.excludedRules", None))

    spark.conf.set("spark.sql.optimizer.excludedRules", excluded)
    try:
        kept, dropped, both, rows, rules = call(10)
        assert rows == [(0, 18), (1, 22), (2, 26)]  # 0+3+6+9, 1+4+7+10, 2+5+8+11
        assert "Exchange" not in kept and "Exchange" not in dropped
        assert both.count("Exchange") == 1 and "hashpartitioning(n#" in both and ", 1)" in both
        assert rules == f"{excluded},{PUSH_DOWN_SEMI_JOINS}"
        assert spark.conf.get("spark.sql.optimizer.excludedRules") == excluded  # given back
        # a large call (checkpoints, the session's settings): the semi and anti joins shuffle,
        # and the join with the frame that is not stored shuffles both of its sides
        large = call(10**6)
        assert "Exchange" in large[0] and "Exchange" in large[1] and large[2].count("Exchange") > 1
        assert large[3] == rows
    finally:
        spark.conf.unset("spark.sql.optimizer.excludedRules")


@pytest.mark.connect
@pytest.mark.parametrize("strategy", ["range", "sticky", "cooperative-sticky"])
def test_assign_decides_from_its_inputs_rows_and_gives_the_same_rows(spark, strategy, monkeypatch):
    from chispa import assert_df_equality

    import spark_assign.lineage as lineage
    import spark_assign.small_inputs as small_inputs
    from spark_assign import assign

    members = spark.createDataFrame(
        [("g1", "c0", ["t0", "t1"], [("t0", 0), ("t0", 1), ("t1", 0)], 1), ("g1", "c1", ["t0", "t1"], [], -1),
         ("g2", "d0", ["t0"], [], -1), ("g2", "d1", ["t1"], [("t1", 2)], 3)],
        "group_id string, member_id string, topics array<string>, "
        "owned array<struct<topic:string,partition:int>>, generation int")
    parts = spark.createDataFrame([(t, p) for t in ("t0", "t1") for p in range(4)], "topic string, partition int")
    kept_on_driver = []  # the frames a small call keeps on the driver: its inputs, then what it materializes
    relation_of = lineage.relation_of
    keep = lambda df, rows: kept_on_driver.append(df) or relation_of(df, rows)  # noqa: E731
    monkeypatch.setattr(lineage, "relation_of", keep)
    monkeypatch.setattr(small_inputs, "relation_of", keep)

    def call(**kwargs):
        kept_on_driver.clear()
        rows = assign(members, parts, strategy, **kwargs).orderBy("group_id", "topic", "partition").collect()
        return len(kept_on_driver) > 0, rows

    session_settings = [spark.conf.get(k, None) for k in SMALL_CALL_SETTINGS]
    with _setting(spark, None):  # 6 subscriptions + 2 groups x 8 partitions = 22 rows
        small, small_rows = call()
        # the inputs first, as read to decide: the members, then the partitions, on the driver
        assert {"member_id", "owned"} <= set(kept_on_driver[0].columns)
        assert kept_on_driver[1].columns[:2] == ["topic", "partition"]
        assert [stored_rows(df) for df in kept_on_driver[:2]] == [None, None]  # read, not stored again
        assert [spark.conf.get(k, None) for k in SMALL_CALL_SETTINGS] == session_settings  # given back
        assert call(validate=False)[0] is False  # no validation: nothing decides
    with _setting(spark, "21"):
        large, large_rows = call()
        assert large is False
    with _setting(spark, "22"):
        assert call()[0] is True
    schema = "group_id string, member_id string, topic string, partition int"
    assert_df_equality(spark.createDataFrame(small_rows, schema), spark.createDataFrame(large_rows, schema))
    # every partition of both groups once (no owned partition moves, so cooperative withholds nothing)
    assert sorted((r.group_id, r.topic, r.partition) for r in small_rows) == [
        (g, t, p) for g in ("g1", "g2") for t in ("t0", "t1") for p in range(4)]


@pytest.mark.parametrize("short_owned", [32, 2])
def test_a_small_call_reads_its_members_once_unless_an_owned_list_is_long(spark, short_owned, monkeypatch):
    # the first read brings the members' rows, each owned list of at most SHORT_OWNED
    # claims whole: a small call whose lists are all that short reads its members once;
    # a longer list (3 claims against a bound of 2) reads them again, whole. Same rows
    import spark_assign.small_inputs as small_inputs
    from spark_assign import assign

    members = spark.createDataFrame(
        [("g1", "c0", ["t0"], [("t0", 0), ("t0", 1), ("t0", 2)], 1), ("g1", "c1", ["t0"], [("t0", 3)], 1),
         ("g1", "c2", ["t0"], None, -1)],
        "group_id string, member_id string, topics array<string>, "
        "owned array<struct<topic:string,partition:int>>, generation int")
    parts = spark.createDataFrame([("t0", p) for p in range(6)], "topic string, partition int")
    read_again = []
    local_relation = small_inputs.local_relation
    monkeypatch.setattr(small_inputs, "SHORT_OWNED", short_owned)
    monkeypatch.setattr(small_inputs, "local_relation", lambda df: read_again.append(df) or local_relation(df))
    rows = sorted(tuple(r) for r in assign(members, parts, "sticky").collect())
    assert len(read_again) == (1 if short_owned < 3 else 0)
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
    from spark_assign.strategies.sticky import _paths

    df = spark.createDataFrame(kinds, "group_id string, _uniform boolean, _racks boolean, _claims boolean")

    @small_call_scope
    def from_stored_rows():
        decide_small_call(spark, lambda: 1)
        stored = materialize(df)
        assert stored_rows(stored) is not None
        return _paths(stored)

    assert stored_rows(df) is None
    assert from_stored_rows() == _paths(df)


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
def test_a_small_calls_driver_rows_pass_exactly_what_the_spark_checks_pass(spark, members, partitions, monkeypatch):
    import spark_assign.inputs as inputs
    from spark_assign.errors import InvalidInputError
    from spark_assign.lineage import local_relation
    from spark_assign.small_inputs import clean_on_driver

    m = inputs.normalize_members(spark.createDataFrame(members, MEMBERS))
    p = inputs.normalize_partitions(spark.createDataFrame(partitions, "topic string, partition int"))
    try:
        inputs.validate_inputs(m, p)  # outside a small call: the Spark checks
        spark_passes = True
    except InvalidInputError:
        spark_passes = False
    on_driver = clean_on_driver(local_relation(m), local_relation(p))
    # never passes what Spark flags; passes every valid input with members
    assert on_driver == (spark_passes and bool(members))

    # a validated small call over valid inputs takes no validation action; a large one does
    checks = []
    one_row = inputs.one_row
    monkeypatch.setattr(inputs, "one_row", lambda df: checks.append(1) or one_row(df))
    if spark_passes and members:
        from spark_assign import assign

        for rows, expected in ((None, []), ("0", [1])):
            checks.clear()
            with _setting(spark, rows):
                assign(m, p, "range").collect()
            assert checks == expected


def test_a_small_calls_result_runs_as_one_job_under_the_sessions_settings(spark):
    """A small call's result is run by its caller after the call has given the session's
    settings back (automatic broadcasts on). Range's and roundrobin's last join is hinted and
    their plans are returned as they are; the sticky family's, lag-aware's and uniform's plans
    join what the call stored, so the call stores its result (small_call_result). Either way
    running the result is one Spark job of one stage, with no broadcast, for a clean group and
    for a group of mixed subscriptions; the rows are those of a new call run with broadcasts
    off. A call inside another small call returns its plan unstored (the outer call reads it
    under the small call's settings)."""
    from spark_assign import assign

    owned = "owned array<struct<topic:string,partition:int>>"
    members = spark.createDataFrame(
        [("g", f"c{i}", ["t0", "t1"], [("t0", i), ("t1", i)], 1) for i in range(4)] + [("g", "c9", ["t0", "t1"], [], 1)]
        + [("mixed", "a", ["t0"], [("t0", 0)], 1), ("mixed", "b", ["t0", "t1"], [("t1", 0)], 1),
           ("mixed", "c", ["t1"], [], 1)],
        f"group_id string, member_id string, topics array<string>, {owned}, generation int")
    partitions = spark.createDataFrame([(t, p) for t in ("t0", "t1") for p in range(10)], "topic string, partition int")
    assert spark.conf.get("spark.sql.autoBroadcastJoinThreshold") != "-1"
    everything = sorted((g, t, p) for g in ("g", "mixed") for t in ("t0", "t1") for p in range(10))
    for strategy in ("range", "roundrobin", "sticky", "cooperative-sticky", "lag-aware"):
        result = assign(members, partitions, strategy)
        assert (stored_rows(result) is None) == (strategy in ("range", "roundrobin")), strategy
        assert "Broadcast" not in _plan(result), strategy
        rows, stages = _stages_per_job(spark, lambda: sorted(result.collect()))
        assert stages == [1], strategy  # one job of one stage
        # every partition once, and the same rows as a new call's plan with broadcasts off
        assert sorted((r.group_id, r.topic, r.partition) for r in rows) == everything, strategy
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
        try:
            assert sorted(assign(members, partitions, strategy).collect()) == rows, strategy
        finally:
            spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")

    @small_call_scope
    def outer():
        decide_small_call(spark, lambda: 1)
        inner = assign(members, partitions, "sticky")
        return stored_rows(inner), sorted(inner.collect())

    inner_rows, inner_result = outer()
    assert inner_rows is None and inner_result == sorted(assign(members, partitions, "sticky").collect())


def test_a_rack_aware_small_call_shuffles_nothing_and_broadcasts_nothing(spark):
    """A rack-aware cooperative-sticky call (KIP-881) on a small group with a claim two members
    make at the same generation (so the per-partition route drops one of them): every Spark job
    of the call is one stage (its unions and joins of joins go through one partition), and there
    are no more jobs than its stores and its result: none is a broadcast's, and its flags (is any
    member on a rack, is any claim dropped) are read off stored rows (before d0f4135 the call ran
    a broadcast and two flag actions). The result is the same as the session's large-call path's."""
    from spark_assign import assign

    owned = "owned array<struct<topic:string,partition:int>>"
    members = spark.createDataFrame(
        [("g", "a", "r1", ["t"], [("t", 0), ("t", 1)], 3), ("g", "b", "r2", ["t"], [("t", 1), ("t", 2)], 3),
         ("g", "c", "r1", ["t"], [], 3)],
        f"group_id string, member_id string, rack string, topics array<string>, {owned}, generation int")
    partitions = spark.createDataFrame([("t", p, [f"r{1 + p % 2}"]) for p in range(6)],
                                       "topic string, partition int, racks array<string>")
    rows, stages = _stages_per_job(spark, lambda: sorted(assign(members, partitions, "cooperative-sticky").collect()))
    assert stages and set(stages) == {1}, stages
    # its stores and its result: a broadcast (a job of one stage) or a flag read by an action adds one
    assert len(stages) <= 12, stages
    with _setting(spark, "0"):  # no call is small: the session's path
        assert sorted(assign(members, partitions, "cooperative-sticky").collect()) == rows
    # cooperative: a partition changing owner is only revoked in this rebalance
    assert len({(r.topic, r.partition) for r in rows}) == len(rows) >= 4, rows


@pytest.mark.connect
def test_check_assignment_reads_small_inputs_to_the_driver_and_finds_the_same_problems(spark, monkeypatch):
    """check_assignment() over small inputs decides a small call from them (the members, the
    partitions and the assignment read to the driver) and finds exactly the problem rows the
    checks find on Spark's own partitions; a good assignment passes, read the same way."""
    import spark_assign.lineage as lineage
    import spark_assign.properties as properties
    import spark_assign.small_inputs as small_inputs
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
    kept_on_driver = []
    relation_of = lineage.relation_of
    keep = lambda df, rows: kept_on_driver.append(df.columns) or relation_of(df, rows)  # noqa: E731
    for module in (lineage, small_inputs, properties):
        monkeypatch.setattr(module, "relation_of", keep)

    def problems(**kwargs):
        kept_on_driver.clear()
        with pytest.raises(AssignmentPropertyError) as raised:
            check_assignment(a.where("group_id != 'good'"), members.where("group_id != 'good'"), parts, **kwargs)
        return str(raised.value).splitlines()[0], sorted(map(str, raised.value.rows)), list(kept_on_driver)

    found = {}
    for setting in (None, "0"):  # small (the default bound), then never small
        with _setting(spark, setting):
            found[setting] = problems(balance="kafka"), problems(cooperative=True)
    kept_on_driver.clear()
    good = a.where("group_id = 'good'")
    assert check_assignment(good, members.where("group_id = 'good'"), parts) is good
    assert len(kept_on_driver) == 3
    assert found["0"][0][2] == []  # never small: nothing read to the driver
    (kafka, kafka_rows, kept), (cooperative, cooperative_rows, _) = found[None]
    assert (kafka, kafka_rows, cooperative, cooperative_rows) == (*found["0"][0][:2], *found["0"][1][:2])
    # the members, the partitions and the assignment, read to the driver in that order
    assert [columns[:2] for columns in kept] == [["group_id", "member_id"], ["topic", "partition"],
                                                 ["group_id", "member_id"]]
    assert kafka == "assignment breaks property checks: 4 problem row(s):"
    assert [r.split("'")[3] for r in kafka_rows] == ["skewed", "twice", "unassigned", "unsubscribed"]
    assert "two or more fewer" in kafka_rows[0] and "more than once" in kafka_rows[1]  # skewed: a holds 3, b none
    assert "'unassigned'" in kafka_rows[2] and "not subscribed" in kafka_rows[3]
    assert cooperative.startswith("assignment breaks property checks:")
    assert any("held by a" in r and "handed_over" in r for r in cooperative_rows)
