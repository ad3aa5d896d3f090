"""What every request does whichever protocol it came by: one data plane (`dataplane`) over the served models
(`repository`), their batchers (`batching`) and interpreters (`interpreters`), loaded (`loading`), reloaded
(`reload`) and counted (`metrics`)."""
