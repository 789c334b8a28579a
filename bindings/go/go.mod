module eldr.dev/eldr

go 1.25
