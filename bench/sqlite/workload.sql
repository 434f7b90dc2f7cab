-- workload.sql: a deterministic SQL workload for the sqlite3 shell (scripts/check-sqlite.sh
-- runs it as `sqlite3 -bail :memory: < workload.sql` and compares the output). Builds a small
-- shop schema, inserts ~115k rows in transactions (recursive CTEs, no random()), indexes it,
-- and runs joins, aggregates, window functions, LIKE/GLOB, CTEs, JSON, FTS5, R-Tree, date
-- and printf functions, UPDATE/DELETE, both in memory and in a temporary on-disk database
-- (ATTACH ''). Output only depends on the SQL; about a second with the stock shell.
.bail on
.headers on
.mode list
.separator |
PRAGMA cache_size = 2000;

-- ---------------------------------------------------------------- schema and data
CREATE TABLE products(id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT, price REAL);
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT, joined TEXT, vip INTEGER DEFAULT 0);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers, day TEXT,
                    status TEXT CHECK(status IN ('new','paid','shipped','returned')));
CREATE TABLE items(order_id INTEGER, product_id INTEGER, qty INTEGER, price REAL,
                   PRIMARY KEY(order_id, product_id)) WITHOUT ROWID;

BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500)
INSERT INTO products(id, name, category, price)
SELECT i,
       printf('%s-%s-%03d', substr('alphabetagammadeltaepsilonzetaetathetaiotakappa', (i * 7) % 40 + 1, 5),
              CASE i % 5 WHEN 0 THEN 'red' WHEN 1 THEN 'green' WHEN 2 THEN 'blue' WHEN 3 THEN 'black' ELSE 'white' END, i),
       CASE i % 7 WHEN 0 THEN 'tools' WHEN 1 THEN 'garden' WHEN 2 THEN 'books' WHEN 3 THEN 'toys'
                  WHEN 4 THEN 'food' WHEN 5 THEN 'music' ELSE 'sports' END,
       round(((i * 7919) % 10007) / 100.0 + 0.99, 2)
FROM n;
COMMIT;

BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8000)
INSERT INTO customers(id, name, city, joined)
SELECT i,
       'cust' || printf('%05d', (i * 48271) % 100000),
       CASE (i * 31) % 11 WHEN 0 THEN 'Oslo' WHEN 1 THEN 'Lima' WHEN 2 THEN 'Pune' WHEN 3 THEN 'Kyiv'
            WHEN 4 THEN 'Riga' WHEN 5 THEN 'Bern' WHEN 6 THEN 'Nice' WHEN 7 THEN 'Graz' WHEN 8 THEN 'Cork'
            WHEN 9 THEN 'Baku' ELSE 'Rome' END,
       date('2015-01-01', '+' || ((i * 37) % 3000) || ' days')
FROM n;
COMMIT;

BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
INSERT INTO orders(id, customer_id, day, status)
SELECT i, (i * 7907) % 8000 + 1, date('2020-01-01', '+' || ((i * 13) % 1461) || ' days'),
       CASE WHEN i % 17 = 0 THEN 'returned' WHEN i % 5 = 0 THEN 'new' WHEN i % 3 = 0 THEN 'paid' ELSE 'shipped' END
FROM n;
COMMIT;

BEGIN;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 59999)
INSERT INTO items(order_id, product_id, qty, price)
SELECT i % 20000 + 1, (i * 7 + (i / 20000) * 131) % 500 + 1, i % 9 + 1, NULL FROM n;
UPDATE items SET price = (SELECT price FROM products WHERE id = items.product_id) * (1 - (qty > 5) * 0.1);
COMMIT;

-- a batch of single-row statements (parser/prepare/VDBE per statement)
BEGIN;
INSERT INTO customers(name, city, joined, vip) VALUES ('Ada', 'London', '2019-12-10', 1);
INSERT INTO customers(name, city, joined, vip) VALUES ('Brian', 'Murray Hill', '2018-03-01', 1);
INSERT INTO customers(name, city, joined, vip) VALUES ('Claude', 'Paris', '2021-07-14', 0);
INSERT INTO customers(name, city, joined, vip) VALUES ('Dennis', 'Murray Hill', '2011-10-12', 1);
INSERT INTO customers(name, city, joined, vip) VALUES ('Edsger', 'Austin', '2002-08-06', 1);
INSERT INTO customers(name, city, joined, vip) VALUES ('Frances', 'Armonk', '2020-08-04', 0);
INSERT INTO customers(name, city, joined, vip) VALUES ('Grace', 'Arlington', '1992-01-01', 1);
INSERT INTO customers(name, city, joined, vip) VALUES ('Haskell', 'Millis', '1982-09-01', 0);
INSERT INTO customers(name, city, joined, vip) VALUES ('O''Neil', 'Quote''s Town', '2000-01-01', 0);
INSERT INTO customers(name, city, joined, vip) VALUES ('Zoë ünicode', 'Zürich', '2010-10-10', 0);
COMMIT;

SELECT 'rows', (SELECT count(*) FROM products), (SELECT count(*) FROM customers),
       (SELECT count(*) FROM orders), (SELECT count(*) FROM items);

-- ---------------------------------------------------------------- indexes
CREATE INDEX orders_customer ON orders(customer_id);
CREATE INDEX orders_day_status ON orders(day, status);
CREATE INDEX items_product ON items(product_id, qty);
CREATE INDEX customers_city ON customers(city, joined);
CREATE UNIQUE INDEX products_name ON products(name);
CREATE INDEX products_expr ON products(lower(category), round(price));
ANALYZE;
SELECT 'stat1', count(*) FROM sqlite_stat1;

-- ---------------------------------------------------------------- aggregates and joins
SELECT category, count(*) AS n, printf('%.2f', avg(price)) AS avg_price, min(price), max(price)
FROM products GROUP BY category ORDER BY category;

SELECT status, count(*) AS orders, count(DISTINCT customer_id) AS customers
FROM orders GROUP BY status ORDER BY status;

SELECT c.city, count(DISTINCT o.id) AS orders, printf('%.2f', sum(i.qty * i.price)) AS revenue
FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id
WHERE o.status <> 'returned'
GROUP BY c.city ORDER BY sum(i.qty * i.price) DESC, c.city;

SELECT p.category, substr(o.day, 1, 4) AS year, sum(i.qty) AS units
FROM items i JOIN products p ON p.id = i.product_id JOIN orders o ON o.id = i.order_id
GROUP BY 1, 2 HAVING units > 3000 ORDER BY 1, 2;

-- top customers with a correlated subquery and LEFT JOIN
SELECT c.id, c.name, c.city,
       (SELECT count(*) FROM orders o WHERE o.customer_id = c.id) AS n_orders,
       printf('%.2f', coalesce(sum(i.qty * i.price), 0)) AS spent
FROM customers c LEFT JOIN orders o ON o.customer_id = c.id LEFT JOIN items i ON i.order_id = o.id
GROUP BY c.id ORDER BY coalesce(sum(i.qty * i.price), 0) DESC, c.id LIMIT 10;

SELECT count(*) AS customers_without_orders FROM customers c
WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id);

SELECT count(*) FROM orders WHERE customer_id IN (SELECT id FROM customers WHERE city IN ('Oslo', 'Rome'));

-- ---------------------------------------------------------------- LIKE, GLOB, string functions
SELECT count(*) AS like_eta FROM products WHERE name LIKE '%eta%';
SELECT count(*) AS like_prefix FROM customers WHERE name LIKE 'cust0%';
SELECT count(*) AS glob_digits FROM customers WHERE name GLOB 'cust[0-4]*7';
SELECT name FROM products WHERE name LIKE '%-red-%' AND price > 90 ORDER BY name LIMIT 5;
SELECT upper(name), length(name), instr(name, '-'), replace(name, '-', '/'), substr(name, -3), hex(substr(name, 1, 2))
FROM products WHERE id IN (1, 250, 500);
SELECT name, city FROM customers WHERE name LIKE '%''%' OR city LIKE 'Z%' OR name LIKE 'zoë%' ORDER BY name;
SELECT trim('  x  '), ltrim('xxay', 'x'), rtrim('ayxx', 'x'), quote('it''s'), char(72, 105), unicode('é'),
       soundex('Robert'), soundex('Rupert'), typeof(1), typeof(1.0), typeof('1'), typeof(x'01'), typeof(NULL);

-- ---------------------------------------------------------------- window functions and CTEs
SELECT day, n, sum(n) OVER (ORDER BY day ROWS BETWEEN 6 PRECEDING AND CURRENT ROW) AS week
FROM (SELECT day, count(*) AS n FROM orders WHERE day BETWEEN '2021-03-01' AND '2021-03-20' GROUP BY day)
ORDER BY day;

SELECT category, name, price, rnk FROM (
  SELECT category, name, price, rank() OVER (PARTITION BY category ORDER BY price DESC, name) AS rnk
  FROM products)
WHERE rnk <= 2 ORDER BY category, rnk;

SELECT city, joined, row_number() OVER w AS rn, lag(joined) OVER w AS prev, ntile(4) OVER w AS quartile,
       first_value(name) OVER w AS first_name
FROM customers WHERE city = 'Bern' AND joined < '2015-02-15'
WINDOW w AS (PARTITION BY city ORDER BY joined, id) ORDER BY joined, id LIMIT 8;

SELECT status, cume_dist() OVER (ORDER BY status), percent_rank() OVER (ORDER BY status), dense_rank() OVER (ORDER BY status)
FROM (SELECT DISTINCT status FROM orders) ORDER BY status;

WITH RECURSIVE fib(a, b, n) AS (SELECT 0, 1, 1 UNION ALL SELECT b, a + b, n + 1 FROM fib WHERE n < 60)
SELECT n, a FROM fib WHERE n % 10 = 0;

WITH RECURSIVE
  cnt(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM cnt WHERE x < 2000),
  primes(p) AS (SELECT x FROM cnt WHERE x > 1 AND NOT EXISTS
                (SELECT 1 FROM cnt d WHERE d.x > 1 AND d.x * d.x <= cnt.x AND cnt.x % d.x = 0))
SELECT count(*), max(p), sum(p) FROM primes;

WITH monthly AS (
  SELECT substr(day, 1, 7) AS month, count(*) AS n FROM orders GROUP BY 1)
SELECT month, n, n - lag(n, 1, n) OVER (ORDER BY month) AS delta FROM monthly
WHERE month LIKE '2022-%' ORDER BY month;

-- mandelbrot in SQL (a classic recursive-CTE stress)
WITH RECURSIVE
  xaxis(x) AS (VALUES(-2.0) UNION ALL SELECT x + 0.05 FROM xaxis WHERE x < 1.2),
  yaxis(y) AS (VALUES(-1.0) UNION ALL SELECT y + 0.1 FROM yaxis WHERE y < 1.0),
  m(iter, cx, cy, x, y) AS (
    SELECT 0, x, y, 0.0, 0.0 FROM xaxis, yaxis
    UNION ALL
    SELECT iter + 1, cx, cy, x * x - y * y + cx, 2.0 * x * y + cy FROM m
    WHERE (x * x + y * y) < 4.0 AND iter < 28),
  m2(iter, cx, cy) AS (SELECT max(iter), cx, cy FROM m GROUP BY cx, cy),
  a(t) AS (SELECT group_concat(substr(' .+*#', 1 + min(iter / 7, 4), 1), '') FROM m2 GROUP BY cy)
SELECT group_concat(rtrim(t), x'0a') FROM a;

-- ---------------------------------------------------------------- JSON, dates, printf, math
SELECT json_object('id', id, 'name', name, 'tags', json_array(category, round(price))) FROM products WHERE id <= 3;
SELECT json_group_array(city) FROM (SELECT DISTINCT city FROM customers ORDER BY city);
SELECT key, value FROM json_each('{"a":1,"b":[1,2,3],"c":{"d":null}}') ORDER BY key;
SELECT json_extract('{"a":{"b":[10,20,30]}}', '$.a.b[1]'), json_set('{"x":1}', '$.y', 2), json_valid('{bad'),
       json_type('[1,2.5,"s",null,true]', '$[1]'), '{"k":[1,2]}' -> '$.k', '{"k":[1,2]}' ->> '$.k[0]';
SELECT date('2024-02-28', '+1 day'), date('2023-02-28', '+1 day'), datetime(0, 'unixepoch'),
       strftime('%Y-%j %W %w %H:%M:%S', '2021-12-31 23:59:59'), julianday('2000-01-01') - julianday('1970-01-01'),
       date('2021-01-31', '+1 month'), date('2021-03-15', 'start of month', '-1 day'), strftime('%s', '2001-09-09 01:46:40');
SELECT printf('%5d|%-5d|%05.1f|%e|%x|%o|%c|%q|%Q|%w|%z', 42, 42, 3.14159, 12345.678, 255, 8, 'xyz', 'a''b', NULL, 'x"y', 'z'),
       printf('%,d', 1234567), printf('%.3s', 'abcdef'), printf('%10.4f', 2.0/3);
SELECT abs(-5), round(2.5), round(-2.5), round(1.23456, 3), 7 / 2, 7 % 3, 7.0 / 2, -7 / 2, 1 << 10, ~5, 5 & 3, 5 | 3,
       max(3, 7, 5), min(3, 7, 5), nullif(3, 3), coalesce(NULL, NULL, 'c'), iif(1 < 2, 'yes', 'no'),
       cast('12abc' AS INTEGER), cast(3.99 AS INTEGER), cast(1e20 AS INTEGER), 9223372036854775807 + 0;
SELECT printf('%.6f', sqrt(2)), printf('%.6f', pi()), printf('%.6f', exp(1)), printf('%.6f', ln(10)), printf('%.6f', log10(1000)),
       printf('%.6f', pow(2, 0.5)), ceil(1.2), floor(-1.2), printf('%.6f', sin(1)), printf('%.6f', atan2(1, 1)), mod(7, 3), trunc(-2.7);
SELECT sum(x), total(x), avg(x), count(x), count(*), group_concat(x, '+') FROM (SELECT 1 AS x UNION ALL SELECT 2 UNION ALL SELECT NULL);

-- ---------------------------------------------------------------- updates, deletes, upserts, triggers
CREATE TABLE audit(id INTEGER PRIMARY KEY, what TEXT, n INTEGER);
CREATE TRIGGER orders_returned AFTER UPDATE OF status ON orders WHEN new.status = 'returned' AND old.status <> 'returned'
BEGIN INSERT INTO audit(what, n) VALUES ('returned ' || new.id, new.customer_id); END;
BEGIN;
UPDATE orders SET status = 'returned' WHERE id % 997 = 0 AND status <> 'returned';
UPDATE customers SET vip = 1 WHERE id IN (SELECT customer_id FROM orders GROUP BY customer_id HAVING count(*) >= 3);
DELETE FROM items WHERE order_id IN (SELECT id FROM orders WHERE status = 'returned' AND day < '2020-06-01');
COMMIT;
SELECT 'audit', count(*), sum(n) FROM audit;
SELECT 'vip', count(*) FROM customers WHERE vip = 1;
SELECT 'items', count(*), sum(qty) FROM items;
CREATE TABLE kv(k TEXT PRIMARY KEY, v INTEGER);
INSERT INTO kv VALUES ('a', 1), ('b', 2);
INSERT INTO kv VALUES ('a', 10), ('c', 3) ON CONFLICT(k) DO UPDATE SET v = v + excluded.v;
INSERT OR REPLACE INTO kv VALUES ('b', 20);
SELECT * FROM kv ORDER BY k;
UPDATE kv SET v = v * 2 RETURNING k, v;
DELETE FROM kv WHERE v > 30 RETURNING *;
SAVEPOINT sp1;
DELETE FROM kv;
ROLLBACK TO sp1;
RELEASE sp1;
SELECT count(*) FROM kv;

-- ---------------------------------------------------------------- views, planner, integrity
CREATE VIEW order_totals AS
SELECT o.id, o.customer_id, o.day, sum(i.qty * i.price) AS total FROM orders o JOIN items i ON i.order_id = o.id GROUP BY o.id;
SELECT count(*), printf('%.2f', sum(total)), printf('%.2f', max(total)) FROM order_totals;
SELECT customer_id, count(*) FROM order_totals WHERE total > 400 GROUP BY customer_id ORDER BY count(*) DESC, customer_id LIMIT 5;
EXPLAIN QUERY PLAN SELECT * FROM orders WHERE customer_id = 42 AND day > '2021-01-01';
EXPLAIN QUERY PLAN SELECT name FROM products WHERE lower(category) = 'books' AND round(price) = 50;
SELECT name FROM products WHERE lower(category) = 'books' AND round(price) BETWEEN 50 AND 52 ORDER BY name;
PRAGMA integrity_check;
PRAGMA foreign_key_check;

-- ---------------------------------------------------------------- FTS5 and R-Tree
CREATE VIRTUAL TABLE docs USING fts5(title, body);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
INSERT INTO docs(rowid, title, body)
SELECT i, 'doc ' || i,
       CASE i % 4 WHEN 0 THEN 'the quick brown fox' WHEN 1 THEN 'jumps over the lazy dog'
                  WHEN 2 THEN 'sqlite full text search' ELSE 'lua virtual machine' END
       || ' ' || (SELECT name FROM products WHERE id = i % 500 + 1)
FROM n;
SELECT count(*) FROM docs WHERE docs MATCH 'fox';
SELECT count(*) FROM docs WHERE docs MATCH 'sqlite AND text NOT lua';
SELECT rowid, title, snippet(docs, 1, '[', ']', '...', 4) FROM docs WHERE docs MATCH 'lazy AND red' ORDER BY rowid LIMIT 3;
SELECT count(*) FROM docs WHERE docs MATCH 'body:virt*';
CREATE VIRTUAL TABLE boxes USING rtree(id, minx, maxx, miny, maxy);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
INSERT INTO boxes SELECT i, (i * 37) % 1000, (i * 37) % 1000 + i % 13 + 1, (i * 91) % 1000, (i * 91) % 1000 + i % 7 + 1 FROM n;
SELECT count(*) FROM boxes WHERE minx >= 100 AND maxx <= 200 AND miny >= 300 AND maxy <= 600;
SELECT id FROM boxes WHERE minx <= 500 AND maxx >= 500 AND miny <= 500 AND maxy >= 500 ORDER BY id;

-- ---------------------------------------------------------------- an on-disk database (temporary file)
ATTACH '' AS disk;
PRAGMA disk.page_size = 4096;
CREATE TABLE disk.big(id INTEGER PRIMARY KEY, a TEXT, b BLOB, c REAL);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
INSERT INTO disk.big SELECT i, printf('%08d-%s', (i * 7919) % 100003, hex(zeroblob(i % 20))), zeroblob(i % 300), i / 7.0 FROM n;
COMMIT;
CREATE INDEX disk.big_a ON big(a);
SELECT count(*), sum(length(b)), printf('%.3f', sum(c)), min(a), max(a) FROM disk.big;
SELECT a FROM disk.big WHERE a > '00050000' ORDER BY a LIMIT 3;
DELETE FROM disk.big WHERE id % 3 = 0;
VACUUM disk;
SELECT count(*), sum(id) FROM disk.big;
PRAGMA disk.integrity_check;
SELECT p.category, count(*) FROM disk.big d JOIN main.products p ON p.id = d.id GROUP BY 1 ORDER BY 1;
DETACH disk;
SELECT 'done';
