-- The summaries view (docs/analytics.md, "summary_compression"). It reads pgmem.summaries, the table of
-- hierarchical summaries (issue 5), so it is created by the migration that comes after that table
-- exists, not by 0006; one `-- name: x` block per view, like sql/views.sql.

-- name: summary_compression
-- Per namespace, memory and summary level: how much the summaries compress the messages they cover.
-- Ratios are source / summary (higher is more compression); NULL when a side was not counted.
CREATE VIEW pgmem.summary_compression AS
SELECT s.namespace,
       s.memory,
       s.level,
       count(*) AS summaries,
       min(s.first_seq) AS first_seq,
       max(s.last_seq) AS last_seq,
       sum(s.source_chars) AS source_chars,
       sum(length(s.content)) AS summary_chars,
       sum(s.source_tokens) AS source_tokens,
       sum(s.summary_tokens) AS summary_tokens,
       round(sum(s.source_chars)::numeric / nullif(sum(length(s.content)), 0), 2) AS char_ratio,
       round(sum(s.source_tokens)::numeric / nullif(sum(s.summary_tokens), 0), 2) AS token_ratio,
       min(s.created_at) AS first_created_at,
       max(s.created_at) AS last_created_at
FROM pgmem.summaries AS s
GROUP BY s.namespace, s.memory, s.level;
