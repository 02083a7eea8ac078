from xmask_cli.cli import main

main()
