"""What every request does whichever protocol it came by: one data plane over the served models
(`dataplane`, its language `call`), how their calls run on their interpreters (`runner`), timed at start-up
(`self_test`), loaded (`loading`), reloaded (`reload`) and counted (`metrics`)."""
