-- The stock the order-payout example reserves, as tables of the application's own in the
-- store's SQLite file. Living in the same file as the checkpoints is what lets a transact
-- effect write them in the very transaction that records the step: the reservation and its
-- record commit together or not at all, so stock moves exactly once per order.
--
-- Sections are named by their "-- name:" line; durable_examples.stock reads them by name.

-- name: create_stock
-- How many units of each sku orders hold reserved right now.
CREATE TABLE IF NOT EXISTS stock (
    sku      TEXT PRIMARY KEY,
    reserved INTEGER NOT NULL DEFAULT 0
);

-- name: create_move
-- Every movement, one row per line moved: the audit trail the demo's ledger checks against
-- the counter above. A reservation is positive, its release negative.
CREATE TABLE IF NOT EXISTS stock_move (
    seq      INTEGER PRIMARY KEY,
    workflow TEXT NOT NULL,
    sku      TEXT NOT NULL,
    quantity INTEGER NOT NULL
);

-- name: move
-- An upsert, so a sku nobody has reserved yet starts at the quantity moved.
INSERT INTO stock (sku, reserved) VALUES (:sku, :quantity)
ON CONFLICT (sku) DO UPDATE SET reserved = reserved + excluded.reserved;

-- name: log
INSERT INTO stock_move (workflow, sku, quantity) VALUES (:workflow, :sku, :quantity);

-- name: moves
SELECT workflow, sku, quantity FROM stock_move ORDER BY seq;

-- name: reserved
SELECT sku, reserved FROM stock ORDER BY sku;
