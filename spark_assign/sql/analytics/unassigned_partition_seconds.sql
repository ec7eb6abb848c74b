-- The availability gap: per group, partitions unassigned after each generation
-- times the seconds until the group's next generation (the last generation
-- counts until the group's latest recorded time).
WITH t AS (
  SELECT group_id, generation, at, COALESCE(unassigned, 0) AS unassigned,
         LEAD(at) OVER (PARTITION BY group_id ORDER BY generation) AS next_at
  FROM generation_times
)
SELECT group_id,
       COUNT(*)                                                                    AS generations,
       SUM(unassigned)                                                             AS unassigned_partitions,
       CAST(SUM(unassigned * (unix_millis(COALESCE(next_at, at)) - unix_millis(at))) / 1000.0 AS DOUBLE)
                                                                                   AS unassigned_partition_seconds
FROM t
GROUP BY group_id
ORDER BY group_id
