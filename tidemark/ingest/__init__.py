"""The way in.

Which landed files are input and how their bytes become lines (landing), the input contract and its
fast path (contract, contract_fast), the stream's landing ledger, a micro-batch's pinned input and
the bounded landing (landing_ledger, input_pins, landing_archive), and reading the quarantine of
refused lines (quarantine).
"""
