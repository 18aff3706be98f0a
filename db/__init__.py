"""The queue's SQL, installed as the package pgqw.sql: migrations/ (DDL, applied once each),
functions/ (one stored function per file, re-applied by every migrate) and security/ (roles and
grants). pgqw.migrate reads them from here, whether installed from a wheel or run from a checkout."""
