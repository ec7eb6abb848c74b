-- Balance and lag per generation, from the assignment rows: partitions per
-- member (members holding nothing are not in `assignments`; the generations
-- table's min_partitions counts them) and lag per member.
WITH per_member AS (
  SELECT group_id, generation, member_id, COUNT(*) AS partitions, SUM(COALESCE(lag, 0)) AS member_lag
  FROM assignments
  GROUP BY group_id, generation, member_id
)
SELECT p.group_id,
       p.generation,
       COUNT(*)                                   AS members_with_partitions,
       LEAST(MIN(p.partitions), MAX(g.min_partitions)) AS min_partitions,
       MAX(p.partitions)                          AS max_partitions,
       MAX(p.partitions) - LEAST(MIN(p.partitions), MAX(g.min_partitions)) AS max_min,
       MAX(p.member_lag)                          AS max_member_lag,
       CAST(AVG(p.member_lag) AS DOUBLE)          AS mean_member_lag
FROM per_member p
JOIN generations g ON g.group_id = p.group_id AND g.generation = p.generation
GROUP BY p.group_id, p.generation
ORDER BY p.group_id, p.generation
