-- The owner of one partition in every generation of a group (null: unassigned),
-- with the generation's time and whether the owner changed.
-- Parameters: :group_id, :topic, :partition
WITH t AS (
  SELECT gt.group_id, gt.generation, gt.at, gt.round, a.member_id
  FROM generation_times gt
  LEFT JOIN assignments a
    ON a.group_id = gt.group_id AND a.generation = gt.generation
   AND a.topic = :topic AND a.partition = :partition
  WHERE gt.group_id = :group_id
)
SELECT group_id,
       :topic      AS topic,
       :partition  AS partition,
       generation,
       round,
       at,
       member_id   AS owner,
       NOT (member_id <=> LAG(member_id) OVER (ORDER BY generation)) AND generation > MIN(generation) OVER () AS owner_changed,
       r.kind      AS revocation
FROM t
LEFT JOIN (SELECT generation AS rg, FIRST(kind) AS kind FROM revocations
           WHERE group_id = :group_id AND topic = :topic AND partition = :partition
           GROUP BY generation) r ON r.rg = t.generation
ORDER BY generation
