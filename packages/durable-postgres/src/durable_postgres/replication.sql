-- What `durable doctor` asks a Postgres primary about its standbys (replication.py says why).
-- No table of the store is read, so nothing here depends on the schema.

-- name: standbys
-- One row: whether this server is itself a standby; synchronous_commit as this connection
-- sees it, which is what the store's own commits use (a role or database may override the
-- server's); synchronous_standby_names; and each physical standby streaming from this server
-- as an [application_name, sync_state] pair. Logical replication's senders are left out: a
-- subscriber is not a server anyone promotes. sync_state is NULL for a role allowed to see
-- that a standby is there but not its state (pg_monitor, or a superuser, may see it).
SELECT pg_is_in_recovery(),
       current_setting('synchronous_commit'),
       current_setting('synchronous_standby_names'),
       coalesce(
           (SELECT json_agg(json_build_array(r.application_name, r.sync_state)
                            ORDER BY r.application_name)
            FROM pg_stat_replication AS r
            WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots AS s
                              WHERE s.active_pid = r.pid AND s.slot_type = 'logical')),
           '[]'::json);
