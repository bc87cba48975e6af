from zagent_cli.entry import main

main()
