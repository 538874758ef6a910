from dctnet.cli import main

main()
