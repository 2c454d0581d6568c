package deploy

// Render is helm template's output by kind/name, for the tests that run the chart's
// objects on a real API server (package deploy_test, which may import the control plane).
var Render = render

// Rendered is one object of the chart's output.
type Rendered = rendered

// MustJSON is a value as JSON, failing the test when it cannot be.
var MustJSON = mustJSON

// Helm runs the pinned helm with args; Chart is the chart's path.
var Helm = helm

const Chart = chart
