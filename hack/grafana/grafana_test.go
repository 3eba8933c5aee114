package grafana

import "testing"

func TestAllValues(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`rate(x{namespace=~"$namespace", job=~"${job}"}[$__rate_interval])`, `rate(x{namespace=~".+", job=~".+"}[1m])`},
		{`sum by (pool) (y{pool=~"$pool"})`, `sum by (pool) (y{pool=~".+"})`},
		{`z`, `z`},
	} {
		if got := AllValues(c.in, "1m"); got != c.want {
			t.Errorf("AllValues(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestQueries(t *testing.T) {
	d := `{"panels":[{"title":"row","panels":[{"title":"p","targets":[{"refId":"A","expr":"up"}]}]}],
	"templating":{"list":[{"name":"ns","type":"query","query":{"query":"label_values(up, namespace)"}},{"name":"ds","type":"datasource"}]}}`
	qs, err := Queries("d.json", []byte(d))
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Expr != "up" || qs[1].Expr != "up" || qs[1].Where != "d.json: variable ns" {
		t.Fatalf("Queries = %+v", qs)
	}
	if _, err := Queries("d.json", []byte(`{"templating":{"list":[{"name":"v","type":"query","query":"up"}]}}`)); err == nil {
		t.Fatal("a variable that is not label_values was accepted")
	}
}
