-- Partitions moved per generation: assigned in both this generation and the group's
-- previous one, to a different member. newly_assigned: assigned now, not before.
WITH gens AS (
  SELECT group_id, generation,
         LAG(generation) OVER (PARTITION BY group_id ORDER BY generation) AS previous_generation
  FROM generations
),
cur AS (
  SELECT g.group_id, g.generation, g.previous_generation, a.topic, a.partition, a.member_id
  FROM gens g JOIN assignments a ON a.group_id = g.group_id AND a.generation = g.generation
)
SELECT g.group_id,
       g.generation,
       g.previous_generation,
       COUNT(c.member_id)                                                            AS assigned,
       COUNT(CASE WHEN p.member_id IS NOT NULL AND p.member_id <> c.member_id THEN 1 END) AS partitions_moved,
       COUNT(CASE WHEN g.previous_generation IS NOT NULL AND c.member_id IS NOT NULL
                   AND p.member_id IS NULL THEN 1 END)                              AS newly_assigned
FROM gens g
LEFT JOIN cur c ON c.group_id = g.group_id AND c.generation = g.generation
LEFT JOIN assignments p
  ON p.group_id = c.group_id AND p.generation = c.previous_generation
 AND p.topic = c.topic AND p.partition = c.partition
GROUP BY g.group_id, g.generation, g.previous_generation
ORDER BY g.group_id, g.generation
