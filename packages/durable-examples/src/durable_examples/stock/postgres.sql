-- The stock the order-payout example reserves, as tables of the application's own beside the
-- store's, in the store's schema (so one URL says where everything lives, and a test's fresh
-- schema isolates both). Being in the same database is what lets a transact effect write them
-- in the very transaction that records the step: the reservation and its record commit
-- together or not at all, so stock moves exactly once per order.
--
-- The schema arrives as a quoted identifier in place of the schema placeholder, filled by
-- psycopg.sql. Keep curly braces out of these comments. Sections are named by "-- name:".

-- name: lock
-- Two workers starting at once would race CREATE TABLE IF NOT EXISTS into a duplicate-type
-- error; the transaction-scoped advisory lock makes them take turns.
SELECT pg_advisory_xact_lock(hashtext('durable_examples.stock'));

-- name: create_stock
-- How many units of each sku orders hold reserved right now.
CREATE TABLE IF NOT EXISTS {schema}.stock (
    sku      text PRIMARY KEY,
    reserved integer NOT NULL DEFAULT 0
);

-- name: create_move
-- Every movement, one row per line moved: the audit trail the demo's ledger checks against
-- the counter above. A reservation is positive, its release negative.
CREATE TABLE IF NOT EXISTS {schema}.stock_move (
    seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow text    NOT NULL,
    sku      text    NOT NULL,
    quantity integer NOT NULL
);

-- name: move
-- An upsert, so a sku nobody has reserved yet starts at the quantity moved.
INSERT INTO {schema}.stock AS s (sku, reserved) VALUES (%(sku)s, %(quantity)s)
ON CONFLICT (sku) DO UPDATE SET reserved = s.reserved + excluded.reserved;

-- name: log
INSERT INTO {schema}.stock_move (workflow, sku, quantity)
VALUES (%(workflow)s, %(sku)s, %(quantity)s);

-- name: moves
SELECT workflow, sku, quantity FROM {schema}.stock_move ORDER BY seq;

-- name: reserved
SELECT sku, reserved FROM {schema}.stock ORDER BY sku;
