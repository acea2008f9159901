-- Migration from schema version 3 to 4: each record keeps the kind of operation that wrote
-- it (durable.interfaces.Operational). Run by connection._create inside the open's one
-- BEGIN IMMEDIATE transaction, after migrate_2.sql and migrate_3.sql when the file was
-- older, and only when durable_meta said less than 4; the version is set to 4 in the same
-- transaction, so a second opener finds 4 and migrates nothing, and a crash leaves the
-- file as it was.
--
-- The column is added last and NULL, which is exactly what every existing record means:
-- written before the store kept operations, refused to no operation, read as it always
-- was. Nothing is rewritten, so the migration costs the same on a file of any size.


-- name: add_operation
ALTER TABLE durable_checkpoint ADD COLUMN operation TEXT;

-- name: mark
UPDATE durable_meta SET value = 4 WHERE name = 'schema_version';
