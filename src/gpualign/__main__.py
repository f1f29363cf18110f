from gpualign.cli.app import main

main()
