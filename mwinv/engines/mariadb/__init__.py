"""MariaDB / MySQL: throw-away servers (`server`) and TPC-H in MariaDB's dialect (`tpch`)."""
