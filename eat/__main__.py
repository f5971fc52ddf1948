from eat.cli import main

main()
