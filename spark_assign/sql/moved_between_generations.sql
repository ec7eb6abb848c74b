-- Partitions of one group whose member differs between two recorded generations.
-- Parameters (Spark named parameter markers):
--   :group_id, :from_generation, :to_generation
--   spark.sql(open("sql/moved_between_generations.sql").read(),
--             args={"group_id": "g1", "from_generation": 1, "to_generation": 2})
-- A NULL from_member: the partition was not assigned in from_generation (new or
-- held back by a cooperative round); a NULL to_member: not assigned in to_generation.
-- Views: `assignments` (AssignmentHistory.register_views()).
WITH before AS (
  SELECT topic, partition, member_id
  FROM assignments
  WHERE group_id = :group_id AND generation = :from_generation
),
after AS (
  SELECT topic, partition, member_id
  FROM assignments
  WHERE group_id = :group_id AND generation = :to_generation
)
SELECT :group_id AS group_id,
       COALESCE(b.topic, a.topic) AS topic,
       COALESCE(b.partition, a.partition) AS partition,
       b.member_id AS from_member,
       a.member_id AS to_member
FROM before AS b
FULL OUTER JOIN after AS a
  ON b.topic = a.topic AND b.partition = a.partition
WHERE NOT (b.member_id <=> a.member_id)
ORDER BY topic, partition
