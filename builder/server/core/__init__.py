"""What every request does whichever protocol it came by: one data plane over the served models
(`dataplane`), their batchers (`batching`) and interpreters (`interpreters`), loaded (`loading`), reloaded
(`reload`) and counted (`metrics`)."""
