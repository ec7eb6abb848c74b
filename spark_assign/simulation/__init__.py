"""The simulation behind :func:`spark_assign.simulate` and :func:`spark_assign.what_if`:
``events`` (the contract, checks, steps and rosters), ``replay`` (the step loop),
``what_if`` (variants and their comparison) and ``analytics`` (the records and the SQL
over them)."""
