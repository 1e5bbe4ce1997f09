"""From a variant here to a file the official GPU MODE runner accepts: ``export`` bundles a variant into one
self-contained ``submission.py``; ``official_rules`` checks a file against what the official server accepts;
``kernelguard`` calls the official pipeline's hack detector when it is installed. The facts of this problem
(its leaderboard, the board's GPUs, the runner's files, the helpers that get inlined) are in ``board``."""
