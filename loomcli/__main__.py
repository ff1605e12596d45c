from loomcli.entry import main

main()
