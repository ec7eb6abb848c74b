"""The history's Delta tables: their schemas (described in :mod:`spark_assign.history`)."""

from __future__ import annotations

from pyspark.sql import types as T

ASSIGNMENTS_SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("member_id", T.StringType()),
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("strategy", T.StringType()),
    T.StructField("protocol", T.StringType()),
    T.StructField("round", T.IntegerType()),
    T.StructField("lag", T.LongType()),
    T.StructField("record_id", T.StringType()),
    T.StructField("recorded_at", T.TimestampType()),
])

REVOCATIONS_SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("member_id", T.StringType()),
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("kind", T.StringType()),
    T.StructField("record_id", T.StringType()),
    T.StructField("recorded_at", T.TimestampType()),
])

#: ``generations``: one row per group per recorded generation.
#:
#: ``previous_generation``: the group's latest generation recorded before this
#: one (null for its first); ``partitions_moved``: partitions assigned in both
#: generations to different members (null without a previous generation);
#: ``members`` counts members with no partition too when ``members`` was given;
#: ``unassigned``: subscribed partitions left unassigned (a cooperative round's
#: transferring partitions; null unless members and partitions were given);
#: ``min_partitions``/``max_partitions``/``max_min``: partitions per member;
#: ``revoked``/``lost``: rows in ``revocations`` (null when unknown);
#: lag columns are null when no lag is known for the group's assigned partitions
#: (members without partitions count as lag 0); ``max_mean_lag_ratio`` is
#: ``max_member_lag / mean_member_lag`` (null when the mean is 0);
#: ``ignored_owned_claims``: owned claims on partitions missing from the
#: metadata (null unless members and partitions were given).
GENERATIONS_SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("previous_generation", T.IntegerType()),
    T.StructField("strategy", T.StringType()),
    T.StructField("protocol", T.StringType()),
    T.StructField("round", T.IntegerType()),
    T.StructField("members", T.LongType()),
    T.StructField("partitions", T.LongType()),
    T.StructField("unassigned", T.LongType()),
    T.StructField("partitions_moved", T.LongType()),
    T.StructField("min_partitions", T.LongType()),
    T.StructField("max_partitions", T.LongType()),
    T.StructField("max_min", T.LongType()),
    T.StructField("revoked", T.LongType()),
    T.StructField("lost", T.LongType()),
    T.StructField("total_lag", T.LongType()),
    T.StructField("max_member_lag", T.LongType()),
    T.StructField("mean_member_lag", T.DoubleType()),
    T.StructField("max_mean_lag_ratio", T.DoubleType()),
    T.StructField("ignored_owned_claims", T.LongType()),
    T.StructField("record_id", T.StringType()),
    T.StructField("recorded_at", T.TimestampType()),
])

MEMBERS_SCHEMA = T.StructType([
    T.StructField("group_id", T.StringType()),
    T.StructField("generation", T.IntegerType()),
    T.StructField("member_id", T.StringType()),
    T.StructField("group_instance_id", T.StringType()),
    T.StructField("rack", T.StringType()),
    T.StructField("topics", T.ArrayType(T.StringType())),
    T.StructField("assignors", T.ArrayType(T.StringType())),
    T.StructField("protocol", T.StringType()),
    T.StructField("record_id", T.StringType()),
    T.StructField("recorded_at", T.TimestampType()),
])

TABLES = {
    "assignments": ASSIGNMENTS_SCHEMA,
    "revocations": REVOCATIONS_SCHEMA,
    "members": MEMBERS_SCHEMA,
    "generations": GENERATIONS_SCHEMA,
}

#: the key columns: a generation of a group, the call that recorded it (its commit
#: marker in ``generations``), and a partition
PAIR = ["group_id", "generation"]
KEY = ["group_id", "generation", "record_id"]
TP = ["topic", "partition"]

#: the columns of a member row given to the writer (the ``members`` table without
#: its record id and time)
MEMBER_ROW = ("group_id", "generation", "member_id", "group_instance_id", "rack", "topics", "assignors", "protocol")
