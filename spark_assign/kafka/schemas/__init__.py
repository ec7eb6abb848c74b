"""Kafka protocol message schemas kafka-python does not ship, in Kafka's own message-schema
format (the JSON that Kafka generates its request classes from), loaded by kafka-python's
schema machinery (:mod:`spark_assign.kafka.kip848`)."""
