"""The generation history: every recorded rebalance, in Delta tables.

``AssignmentHistory(location)`` keeps, under ``location`` (a folder, or a
catalog prefix such as ``main.kafka_ops`` when Spark has Delta configured):

``assignments``
    one row per assigned partition per generation: ``group_id, generation,
    member_id, topic, partition, strategy, protocol, round, lag, record_id,
    recorded_at``.
``revocations``
    what members gave up: ``group_id, generation, member_id, topic, partition,
    kind`` (``'revoked'``: owned before, assigned elsewhere or not at all now;
    ``'lost'``: lost without a revocation, as the caller reports), plus
    ``record_id, recorded_at``.
``members``
    who was in the group at each generation: ``group_id, generation, member_id,
    group_instance_id, rack, topics, assignors, protocol`` (members holding no
    partition too), recorded when the call gives its members; a later rebalance
    takes each member's owned partitions from here (:mod:`spark_assign.ownership`).
``generations``
    one row per group per generation, with the summary a dashboard needs (see
    :data:`GENERATIONS_SCHEMA`). It is the commit marker of the history.

**Generation numbers**, one rule everywhere (``assign`` records, ``rebalance()``,
``simulate()``, the pipelines): a group's next generation is one more than the
highest it has had, the latest recorded here or its members' own ``generation``,
whichever is higher (1 for a new group); round *r* of a rebalance is that plus
*r* - 1.

Atomicity: one :meth:`AssignmentHistory.record` (or ``record_generations``) call makes one Delta commit per
table, ``assignments`` and ``revocations`` first and ``generations`` last. Every
reader keeps only the ``assignments`` / ``revocations`` rows whose
``(group_id, generation, record_id)`` is in ``generations``, so a call killed
midway shows nothing of itself, and the generations recorded before it stay
intact.

Idempotence: each commit carries a Delta transaction marker whose app id is
``spark-assign:<table>:<record_id>``, where ``record_id`` is an
order-independent hash of the call's ``(group_id, generation)`` pairs; a retried call skips the
tables it already committed. Pairs already in ``generations`` are dropped
before writing: recording the same generation with the same assignment again
is a quiet no-op; with a different assignment it raises :class:`HistoryError`
(a generation, once recorded, never changes; record a new generation instead).
A call that finds its record id taken by other rows (another writer of the same
generations, or one killed before its last commit) writes under the record id extended
with a hash of its own rows.

Layout: the tables are not partitioned. A call typically records every group
once (10,000 groups -> one generation each); partitioning by ``group_id`` would
write 10,000 tiny files per call and table. Unpartitioned, a call writes a few
files per table; :meth:`AssignmentHistory.optimize` compacts them.

Concurrent writers: the ``generations`` commit lands only if none of its pairs was
committed meanwhile, so two writers of the same generation of a group land exactly one, and
the other gets a retryable :class:`~spark_assign.errors.ConcurrentWriteError`; writers of
different generations both land. The ``spark-delta`` backend commits conditionally
(:meth:`~spark_assign.storage.spark_delta.SparkDeltaStore.append_new`); the embedded backend's
writers take turns under a lock file (:mod:`spark_assign.storage.locking`).

Code: :class:`~.handle.AssignmentHistory` is the handle (:mod:`.handle`); its read methods
live in :class:`~.reader.HistoryReader`, its writes in :class:`~.writer.HistoryWriter` (with the
``generations`` summary in :mod:`.stats`), the tables' schemas in :mod:`.tables`.
"""

from .commit import record_id
from .handle import AssignmentHistory
from .tables import ASSIGNMENTS_SCHEMA, GENERATIONS_SCHEMA, MEMBERS_SCHEMA, REVOCATIONS_SCHEMA, TABLES

__all__ = ["AssignmentHistory", "ASSIGNMENTS_SCHEMA", "GENERATIONS_SCHEMA", "MEMBERS_SCHEMA", "REVOCATIONS_SCHEMA",
           "TABLES", "record_id"]
