from zagent_cli.main import main

main()
