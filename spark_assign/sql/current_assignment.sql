-- Current assignment of every group: the rows of its latest recorded generation.
-- Views: `assignments`, `generations` (AssignmentHistory.register_views()).
-- Columns: group_id, generation, member_id, topic, partition, strategy, protocol, lag.
SELECT a.group_id,
       a.generation,
       a.member_id,
       a.topic,
       a.partition,
       a.strategy,
       a.protocol,
       a.lag
FROM assignments AS a
JOIN (SELECT group_id, MAX(generation) AS generation
      FROM generations
      GROUP BY group_id) AS latest
  ON a.group_id = latest.group_id
 AND a.generation = latest.generation
ORDER BY a.group_id, a.member_id, a.topic, a.partition
