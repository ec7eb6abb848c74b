-- Partitions per member in every group's current (latest recorded) generation,
-- with the member's topics, its total lag (NULL without lags) and how far it is
-- from the group's least-loaded member. Members holding no partition are not in
-- `assignments`: the group's `generations.members` / `min_partitions` count them.
-- Views: `assignments`, `generations` (AssignmentHistory.register_views()).
WITH latest AS (
  SELECT group_id, MAX(generation) AS generation
  FROM generations
  GROUP BY group_id
),
per_member AS (
  SELECT a.group_id,
         a.generation,
         a.member_id,
         COUNT(*) AS partitions,
         SORT_ARRAY(COLLECT_SET(a.topic)) AS topics,
         SUM(a.lag) AS lag
  FROM assignments AS a
  JOIN latest AS l
    ON a.group_id = l.group_id AND a.generation = l.generation
  GROUP BY a.group_id, a.generation, a.member_id
)
SELECT p.group_id,
       p.generation,
       p.member_id,
       p.partitions,
       p.topics,
       p.lag,
       p.partitions - g.min_partitions AS above_group_min
FROM per_member AS p
JOIN generations AS g
  ON p.group_id = g.group_id AND p.generation = g.generation
ORDER BY p.group_id, p.member_id
