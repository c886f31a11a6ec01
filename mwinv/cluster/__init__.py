"""A distributed PostgreSQL on one host: node namespaces, capped nodes, shaped links, TPC-H by scheme."""
