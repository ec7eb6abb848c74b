"""One module per strategy. Each exposes ``assign_<name>(members, partitions, *, lags=None, **options)``
over normalized, validated inputs (see :mod:`spark_assign.inputs`)."""
