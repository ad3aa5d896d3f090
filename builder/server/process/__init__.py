"""The process boundary: what crosses it (`messages`, typed), how (`channel`: shared memory and a notice over a
Unix socket) and the model process on its far side (`model_process`)."""
