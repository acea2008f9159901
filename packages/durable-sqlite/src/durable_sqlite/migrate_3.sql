-- Migration from schema version 2 to 3 (per-queue limits). Run by connection._create inside
-- the open's one BEGIN IMMEDIATE transaction, after schema.sql has created durable_limit,
-- durable_slot, durable_handout and durable_priority (all empty: no queue was limited and
-- no workflow prioritized before them), and only when durable_meta said 2. Nothing to copy,
-- so the migration is the mark alone.


-- name: mark
UPDATE durable_meta SET value = 3 WHERE name = 'schema_version';
