from liger_perf.cli import main

main()
