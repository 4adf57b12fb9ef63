"""The incremental state database: what each file looked like when last read (store, db),
which files a scan must read again (plan), outcomes to JSON and back (codec), and
``--sample`` rotation (sample)."""
