# Sourced by the tools/check_*.sh exactness scripts: $exactness_model, the --set arguments of the
# small model the MPI tests train (2 blocks, n_embd 64, dropout 0.1, clipping at 0.5 with norms
# above it, a log line and its metrics every step, validation every 5), reading $data for $steps
# steps; each script adds its own keys.
exactness_model="--set model.n_layer=2 --set model.n_embd=64 --set model.n_head=2 --set model.dropout=0.1
  --set train.batch_size=2 --set train.seq_len=64 --set model.block_size=64 --set train.log_interval=1
  --set train.eval_interval=5 --set train.eval_batches=2 --set sample.count=0 --set optim.warmup_steps=2
  --set optim.grad_clip=0.5 --set data.dir=$data --set train.max_steps=$steps --overwrite"
