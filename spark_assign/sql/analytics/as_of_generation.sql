-- Every group's assignment as of a Delta version of the generations table:
-- `generations_asof` is that table read at the version that committed
-- generation N of a group (time travel, see spark_assign.simulate.as_of_generation);
-- each group shows its latest generation as of then.
WITH latest AS (
  SELECT group_id, MAX(generation) AS generation FROM generations_asof GROUP BY group_id
)
SELECT a.group_id, a.generation, a.member_id, a.topic, a.partition
FROM assignments a
JOIN latest l ON l.group_id = a.group_id AND l.generation = a.generation
JOIN generations_asof g ON g.group_id = a.group_id AND g.generation = a.generation AND g.record_id = a.record_id
ORDER BY a.group_id, a.member_id, a.topic, a.partition
