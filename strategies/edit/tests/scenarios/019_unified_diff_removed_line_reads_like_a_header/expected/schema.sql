++ schema v2
CREATE TABLE t (id INT);
