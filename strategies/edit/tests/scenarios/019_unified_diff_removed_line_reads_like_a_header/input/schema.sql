-- schema v1
CREATE TABLE t (id INT);
