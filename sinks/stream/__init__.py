"""What every stream-store sink shares (Kafka, and the stores that follow it).

A stream-store sink writes each change as one Debezium JSON message (key, value, headers) into a
stream per table, exactly once per batch. The parts that do not depend on the store live here:

* :mod:`sinks.stream.config`: the ``sink:`` keys of the message format (topic prefix, JsonConverter
  schemas, tombstones, schema change events, the Debezium value encodings, the staging folder);
* :mod:`sinks.stream.messages`: the executor side (encode change rows, stage them as Arrow files)
  and the driver side (read a batch's messages back in commit order, with Debezium's headers);
* :mod:`sinks.stream.batches`: which DDLs a batch publishes, and the staging folder's upkeep.

A store's own module adds its client, its exactly-once protocol and its config keys.
"""
