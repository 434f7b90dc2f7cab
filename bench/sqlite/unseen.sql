-- unseen.sql: a second deterministic SQL workload for the sqlite3 shell, the "unseen" input of
-- bench/optimize.sh (profiles are trained on workload.sql only). A different mix on purpose:
-- a ledger with triggers maintaining balances, UPSERTs, a key/value table with TEXT keys,
-- views, generated columns, partial and expression indexes, many small prepared statements,
-- set operations, recursive CTEs (sudoku, graph walk, collatz), the csv / json / line / box
-- output modes of the shell, and string/blob functions the training workload does not use.
-- No random(), no time-dependent function; every result is ordered. Run as
-- `sqlite3 -bail :memory: < unseen.sql`; about a second with the stock shell.
.bail on
.headers on
.mode list
.separator |

-- ---------------------------------------------------------------- ledger with triggers
CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT NOT NULL, kind TEXT, balance INTEGER NOT NULL DEFAULT 0,
                      n_moves INTEGER NOT NULL DEFAULT 0,
                      label TEXT GENERATED ALWAYS AS (kind || ':' || owner) VIRTUAL);
CREATE TABLE moves(id INTEGER PRIMARY KEY, src INTEGER REFERENCES accounts, dst INTEGER REFERENCES accounts,
                   amount INTEGER CHECK(amount > 0), memo TEXT);
CREATE TRIGGER moves_apply AFTER INSERT ON moves BEGIN
  UPDATE accounts SET balance = balance - new.amount, n_moves = n_moves + 1 WHERE id = new.src;
  UPDATE accounts SET balance = balance + new.amount, n_moves = n_moves + 1 WHERE id = new.dst;
END;
CREATE TRIGGER moves_undo AFTER DELETE ON moves BEGIN
  UPDATE accounts SET balance = balance + old.amount, n_moves = n_moves - 1 WHERE id = old.src;
  UPDATE accounts SET balance = balance - old.amount, n_moves = n_moves - 1 WHERE id = old.dst;
END;

BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
INSERT INTO accounts(id, owner, kind)
SELECT i, 'owner' || (i * 2654435761 % 1000003), CASE i % 4 WHEN 0 THEN 'cash' WHEN 1 THEN 'bank' WHEN 2 THEN 'card' ELSE 'loan' END
FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
INSERT INTO moves(src, dst, amount, memo)
SELECT (i * 7919) % 3000 + 1, (i * 104729 + i / 3000 * 31 + 17) % 3000 + 1, (i * 37) % 997 + 1,
       CASE WHEN i % 11 = 0 THEN 'rent ' || (i % 12 + 1) WHEN i % 7 = 0 THEN 'food' ELSE 'misc #' || (i % 100) END
FROM n;
COMMIT;
SELECT 'ledger', count(*), sum(amount), (SELECT sum(balance) FROM accounts), (SELECT sum(n_moves) FROM accounts) FROM moves;

CREATE INDEX moves_src ON moves(src, amount);
CREATE INDEX moves_big ON moves(dst) WHERE amount > 900;
CREATE INDEX accounts_label ON accounts(label);
CREATE INDEX moves_memo ON moves(substr(memo, 1, 4));

-- deleting through the trigger, then balances again
BEGIN;
DELETE FROM moves WHERE id % 13 = 0;
COMMIT;
SELECT 'after delete', count(*), (SELECT sum(balance) FROM accounts), (SELECT max(n_moves) FROM accounts) FROM moves;

CREATE VIEW account_summary AS
  SELECT a.kind, count(*) AS accounts, sum(a.balance) AS total, min(a.balance) AS lowest, max(a.balance) AS highest
  FROM accounts a GROUP BY a.kind;
SELECT * FROM account_summary ORDER BY kind;
SELECT label, balance FROM accounts ORDER BY balance DESC, id LIMIT 5;
SELECT label, balance FROM accounts WHERE label BETWEEN 'bank:owner5' AND 'bank:owner6' ORDER BY label LIMIT 5;
SELECT dst, count(*) FROM moves WHERE amount > 900 GROUP BY dst HAVING count(*) >= 5 ORDER BY count(*) DESC, dst LIMIT 5;
SELECT substr(memo, 1, 4) AS m, count(*), sum(amount) FROM moves GROUP BY m ORDER BY m;
SELECT a.id, a.owner,
       (SELECT sum(amount) FROM moves WHERE src = a.id) AS paid,
       (SELECT sum(amount) FROM moves WHERE dst = a.id) AS received
FROM accounts a WHERE a.id % 500 = 1 ORDER BY a.id;

-- ---------------------------------------------------------------- key/value store with UPSERT
CREATE TABLE kv(k TEXT PRIMARY KEY, v INTEGER, hits INTEGER DEFAULT 1) WITHOUT ROWID;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60000)
INSERT INTO kv(k, v) SELECT 'key:' || hex(i * 2246822519 % 40009), i FROM n WHERE 1
  ON CONFLICT(k) DO UPDATE SET v = v + excluded.v, hits = hits + 1;
COMMIT;
SELECT 'kv', count(*), sum(hits), max(hits), sum(v) % 1000000007 FROM kv;
SELECT k, v, hits FROM kv WHERE hits > 1 ORDER BY hits DESC, k LIMIT 5;
SELECT count(*) FROM kv WHERE k GLOB 'key:313*' OR k LIKE 'key:%39';
-- many small statements: prepare, bind, step, finalize
BEGIN;
INSERT OR REPLACE INTO kv(k, v) VALUES ('alpha', 1);
INSERT OR REPLACE INTO kv(k, v) VALUES ('beta', 2);
INSERT OR REPLACE INTO kv(k, v) VALUES ('gamma', 3);
INSERT OR IGNORE INTO kv(k, v) VALUES ('alpha', 100);
UPDATE kv SET v = v * 10 WHERE k IN ('alpha', 'beta');
REPLACE INTO kv(k, v) VALUES ('delta', 4);
DELETE FROM kv WHERE k = 'gamma';
INSERT INTO kv(k, v) VALUES ('beta', 7) ON CONFLICT DO NOTHING;
INSERT INTO kv(k, v) VALUES ('delta', 7) ON CONFLICT(k) DO UPDATE SET v = excluded.v + kv.v, hits = kv.hits + 1;
COMMIT;
SELECT k, v, hits FROM kv WHERE k NOT LIKE 'key:%' ORDER BY k;
SAVEPOINT sp1;
DELETE FROM kv WHERE k LIKE 'key:1%';
SELECT 'in savepoint', count(*) FROM kv;
ROLLBACK TO sp1;
RELEASE sp1;
SELECT 'after rollback', count(*) FROM kv;

-- ---------------------------------------------------------------- set operations, DISTINCT, CASE
SELECT count(*) FROM (SELECT src FROM moves INTERSECT SELECT dst FROM moves);
SELECT count(*) FROM (SELECT id FROM accounts EXCEPT SELECT src FROM moves WHERE amount > 500);
SELECT kind, n FROM (SELECT kind, count(*) AS n FROM accounts GROUP BY kind
                     UNION ALL SELECT 'all', count(*) FROM accounts) ORDER BY n DESC, kind;
SELECT DISTINCT amount % 10 AS d FROM moves WHERE amount < 40 ORDER BY d DESC LIMIT 4 OFFSET 2;
SELECT CASE WHEN balance < -5000 THEN 'deep' WHEN balance < 0 THEN 'neg' WHEN balance = 0 THEN 'zero'
            WHEN balance < 5000 THEN 'pos' ELSE 'rich' END AS bucket, count(*)
FROM accounts GROUP BY bucket ORDER BY min(balance);
SELECT ntile(3) OVER (ORDER BY total) AS third, kind, total FROM account_summary ORDER BY kind;
SELECT id, amount, lead(amount, 2, -1) OVER (ORDER BY id) AS ahead,
       sum(amount) OVER (ORDER BY id RANGE BETWEEN 5 PRECEDING AND 5 FOLLOWING) AS around,
       nth_value(amount, 3) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS third
FROM moves WHERE id BETWEEN 1000 AND 1012 ORDER BY id;

-- ---------------------------------------------------------------- recursive CTEs
-- sudoku (from SQLite's documentation of WITH RECURSIVE)
WITH RECURSIVE
  input(sud) AS (VALUES('53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79')),
  digits(z, lp) AS (VALUES('1', 1) UNION ALL SELECT CAST(lp + 1 AS TEXT), lp + 1 FROM digits WHERE lp < 9),
  x(s, ind) AS (
    SELECT sud, instr(sud, '.') FROM input
    UNION ALL
    SELECT substr(s, 1, ind - 1) || z || substr(s, ind + 1), instr(substr(s, 1, ind - 1) || z || substr(s, ind + 1), '.')
    FROM x, digits AS z
    WHERE ind > 0
      AND NOT EXISTS (
        SELECT 1 FROM digits AS lp
        WHERE z.z = substr(s, ((ind - 1) / 9) * 9 + lp, 1)
           OR z.z = substr(s, ((ind - 1) % 9) + (lp - 1) * 9 + 1, 1)
           OR z.z = substr(s, (((ind - 1) / 3) % 3) * 3 + ((ind - 1) / 27) * 27 + lp + ((lp - 1) / 3) * 6, 1)))
SELECT s FROM x WHERE ind = 0;
-- reachability over the money graph, depth-bounded
WITH RECURSIVE reach(id, depth) AS (
  SELECT id, 0 FROM accounts WHERE id <= 3
  UNION
  SELECT m.dst, r.depth + 1 FROM reach r JOIN moves m ON m.src = r.id WHERE r.depth < 3 AND m.amount > 400)
SELECT depth, count(DISTINCT id) FROM reach GROUP BY depth ORDER BY depth;
-- Collatz lengths
WITH RECURSIVE c(start, n, steps) AS (
  SELECT value, value, 0 FROM (WITH RECURSIVE s(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM s WHERE value < 6000) SELECT value FROM s)
  UNION ALL
  SELECT start, CASE WHEN n % 2 THEN 3 * n + 1 ELSE n / 2 END, steps + 1 FROM c WHERE n > 1)
SELECT start, max(steps) FROM c GROUP BY start ORDER BY max(steps) DESC, start LIMIT 3;

-- ---------------------------------------------------------------- strings and blobs
SELECT group_concat(k, ',') FROM (SELECT k FROM kv WHERE k NOT LIKE 'key:%' ORDER BY k);
SELECT length(zeroblob(1000)), length(CAST(x'00ff10' AS BLOB)), unhex_like
FROM (SELECT upper(hex('Rivet')) AS unhex_like);
SELECT replace(printf('%08d', 42), '0', '_'), reverse_ish, instr('hello world', 'o w'), substr('abcdef', 2, 3)
FROM (SELECT group_concat(c, '') AS reverse_ish FROM (
  WITH RECURSIVE r(i, c) AS (SELECT 5, substr('stack', 5, 1) UNION ALL SELECT i - 1, substr('stack', i - 1, 1) FROM r WHERE i > 1)
  SELECT c FROM r));
SELECT like('a_c', 'abc'), glob('a*', 'abc'), 'abc' LIKE 'A%' ESCAPE '\', 'Straße' LIKE 'STRASSE',
       lower('ÀÉÎ'), upper('àéî'), length('ÀÉÎ'), length(CAST('ÀÉÎ' AS BLOB));
SELECT quote(x'DEADBEEF'), quote(3.5), quote(NULL), quote(-0.0), format('%s=%d', 'n', 7), concat_like
FROM (SELECT 'a' || 1 || 2.5 || NULL AS concat_like);
SELECT json_group_object(kind, n) FROM (SELECT kind, count(*) AS n FROM accounts GROUP BY kind ORDER BY kind);
SELECT j.key, j.value, j.type FROM json_each('[1, "two", 3.5, null, {"x": [true, false]}]') AS j ORDER BY j.key;
SELECT json_remove('{"a":1,"b":2,"c":[1,2,3]}', '$.b', '$.c[0]'), json_insert('[1,2]', '$[#]', 3), json_patch('{"a":1}', '{"b":2,"a":null}');
SELECT fullkey, atom FROM json_tree('{"p":{"q":[10,{"r":20}]}}') WHERE atom IS NOT NULL ORDER BY fullkey;

-- ---------------------------------------------------------------- other output modes of the shell
.mode csv
SELECT id, owner, kind, balance FROM accounts WHERE id <= 4 ORDER BY id;
.mode json
SELECT id, src, dst, amount, memo FROM moves WHERE id IN (1, 2, 3) ORDER BY id;
.mode line
SELECT * FROM account_summary WHERE kind = 'loan';
.mode box
SELECT kind, accounts, total FROM account_summary ORDER BY kind;
.mode quote
SELECT k, v FROM kv WHERE k NOT LIKE 'key:%' ORDER BY k;
.mode list
.headers off

-- ---------------------------------------------------------------- schema changes, integrity
ALTER TABLE accounts ADD COLUMN note TEXT DEFAULT 'none';
ALTER TABLE accounts RENAME COLUMN note TO remark;
UPDATE accounts SET remark = 'overdrawn' WHERE balance < -4000;
SELECT remark, count(*) FROM accounts GROUP BY remark ORDER BY remark;
CREATE TABLE moves_copy AS SELECT * FROM moves WHERE memo LIKE 'rent%';
SELECT count(*), sum(amount) FROM moves_copy;
DROP TABLE moves_copy;
SELECT name, type FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name;
PRAGMA integrity_check;
PRAGMA foreign_key_check;
