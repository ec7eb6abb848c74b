-- Rounds per rebalance: a rebalance starts at a generation recorded as round 1
-- (or with no round) and takes every following generation of a higher round.
WITH g AS (
  SELECT group_id, generation, COALESCE(round, 1) AS round, protocol, strategy,
         SUM(CASE WHEN COALESCE(round, 1) = 1 THEN 1 ELSE 0 END)
           OVER (PARTITION BY group_id ORDER BY generation) AS rebalance
  FROM generations
)
SELECT group_id,
       rebalance,
       MIN(generation)  AS first_generation,
       MAX(generation)  AS last_generation,
       COUNT(*)         AS rounds,
       FIRST(strategy)  AS strategy,
       FIRST(protocol)  AS protocol
FROM g
GROUP BY group_id, rebalance
ORDER BY group_id, rebalance
