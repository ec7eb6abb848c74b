-- generation_times: one row per group per generation with its time and unassigned count.
-- Simulated histories carry the simulated time in the `simulation` view.
SELECT g.group_id,
       g.generation,
       g.round,
       g.strategy,
       g.protocol,
       COALESCE(s.at, g.recorded_at)          AS at,
       COALESCE(s.unassigned, g.unassigned)   AS unassigned,
       g.members,
       g.partitions
FROM generations g
LEFT JOIN (SELECT group_id, generation, MAX(at) AS at, MAX(unassigned) AS unassigned
           FROM simulation GROUP BY group_id, generation) s
  ON s.group_id = g.group_id AND s.generation = g.generation
