module eldr.dev/eldr/examples/go-gateway

go 1.19

require eldr.dev/eldr v0.0.0

replace eldr.dev/eldr => ../../bindings/go
