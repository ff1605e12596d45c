from loomcli.cli import main

main()
