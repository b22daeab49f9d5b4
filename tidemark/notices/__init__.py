"""Availability notices: durable outbox in the lake, cadence (per partition, coalesced, late digest),
and a background sender to Pub/Sub. Entry point for the stream: service.NoticeService.

    outbox.py     _notices/outbox -> _notices/sent, the durable record of what is owed / advertised
    cadence.py    which notice a receipt partition belongs to (CadencePolicy) and coalescing groups
    sender.py     google-cloud-pubsub PublisherClient wrapper: publish a batch, report acks
    service.py    the stream listener + background thread tying them together
    report.py     what was advertised, what is owed, which complete partitions no notice covers
"""
