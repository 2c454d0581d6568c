package consumption

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// PricesName is the ConfigMap in Allot's namespace that prices a GPU-hour per node pool or
// GPU model (each key a pool's or a model's name, each value a price), the chart's
// consumption.prices.
const PricesName = "allot-prices"

// Prices reads the prices the chart was given; none where there is no such ConfigMap.
func Prices(ctx context.Context, client kubernetes.Interface) (map[string]float64, error) {
	cm, err := client.CoreV1().ConfigMaps(v1alpha1.SystemNamespace).Get(ctx, PricesName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the prices (ConfigMap %s/%s): %w", v1alpha1.SystemNamespace, PricesName, err)
	}
	out := map[string]float64{}
	for k, v := range cm.Data {
		p, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("ConfigMap %s/%s: %s: %q is not a price per GPU-hour (a number, 0 or more)", v1alpha1.SystemNamespace, PricesName, k, v)
		}
		out[k] = p
	}
	return out, nil
}

// Costs prices each group: each figure's GPU-hours given at its node pool's price, else its
// GPU model's. A pool and model with no price is refused by name.
func Costs(days []Day, by []string, parents map[string]string, groups []Group, price map[string]float64) ([]float64, error) {
	fine, err := Sum(days, append(append([]string(nil), by...), "pool", "model"), parents)
	if err != nil {
		return nil, err
	}
	at := map[string]int{}
	for i, g := range groups {
		at[fmt.Sprintf("%q", g.By)] = i
	}
	costs := make([]float64, len(groups))
	var unpriced []string
	for _, f := range fine {
		n := len(by)
		pool, model := f.By[n], f.By[n+1]
		p, ok := price[pool]
		if !ok {
			p, ok = price[model]
		}
		if !ok {
			unpriced = append(unpriced, pool+"/"+model)
			continue
		}
		costs[at[fmt.Sprintf("%q", f.By[:n])]] += p * f.Allocated / 3600
	}
	if len(unpriced) > 0 {
		return nil, fmt.Errorf("no price for pool/model %s: give one for the pool or the model", strings.Join(unpriced, ", "))
	}
	return costs, nil
}
