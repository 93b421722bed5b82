"""Statistics, tables, figures and the HTML report of a study, read from its parquet store."""
