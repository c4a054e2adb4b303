package allocator

// This file holds an exact rectangular assignment solver (the Hungarian
// method with potentials, O(rows² × cols)) over lexicographic cost vectors,
// and the canonical choice among its optimal answers.

// cost is a cost vector. Vectors add component-wise and compare
// lexicographically, which makes them an ordered abelian group: the
// Hungarian method needs nothing else, so it minimises the first
// component, then the second, and so on, exactly. Components stay far below
// overflow (see maxAlign).
type cost [5]int64

func (a cost) add(b cost) cost {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

func (a cost) sub(b cost) cost {
	for i := range a {
		a[i] -= b[i]
	}
	return a
}

func (a cost) less(b cost) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// never is more than any cost a problem can reach.
var never = cost{1 << 60}

// assignment is a solved problem: rows 0..n-1 matched to distinct columns
// 0..m-1 (n <= m) at minimum total cost, with the dual potentials that prove
// it.
type assignment struct {
	n, m int
	c    []cost // c[i*m+j]
	u, v []cost // row and column potentials: u[i]+v[j] <= c(i,j), v[j] <= 0
	col  []int  // row -> column
}

// solve runs the Hungarian method (shortest augmenting paths with
// potentials; the classic e-maxx formulation, 1-based inside). Every row is
// matched; a column is matched or not.
func solve(n, m int, c []cost) *assignment {
	u := make([]cost, n+1)
	v := make([]cost, m+1)
	p := make([]int, m+1) // column -> row (1-based, 0 = free)
	way := make([]int, m+1)
	minv := make([]cost, m+1)
	used := make([]bool, m+1)
	for i := 1; i <= n; i++ {
		p[0] = i
		j0 := 0
		for j := range minv {
			minv[j], used[j] = never, false
		}
		for {
			used[j0] = true
			i0, delta, j1 := p[j0], never, 0
			row := c[(i0-1)*m:]
			for j := 1; j <= m; j++ {
				if used[j] {
					continue
				}
				if cur := row[j-1].sub(u[i0]).sub(v[j]); cur.less(minv[j]) {
					minv[j], way[j] = cur, j0
				}
				if minv[j].less(delta) {
					delta, j1 = minv[j], j
				}
			}
			for j := 0; j <= m; j++ {
				if used[j] {
					u[p[j]] = u[p[j]].add(delta)
					v[j] = v[j].sub(delta)
				} else {
					minv[j] = minv[j].sub(delta)
				}
			}
			j0 = j1
			if p[j0] == 0 {
				break
			}
		}
		for j0 != 0 {
			j1 := way[j0]
			p[j0] = p[j1]
			j0 = j1
		}
	}
	a := &assignment{n: n, m: m, c: c, u: u[1:], v: v[1:], col: make([]int, n)}
	for j := 1; j <= m; j++ {
		if p[j] != 0 {
			a.col[p[j]-1] = j - 1
		}
	}
	return a
}

// canonical replaces a.col by one optimal assignment chosen without regard
// to how the solver got there: first the column set that, listed in
// ascending order, is lexicographically smallest, then, row by row in
// order, the smallest column that row can take.
//
// By LP duality an assignment is optimal exactly when it uses only tight
// edges (u[i]+v[j] == c(i,j)) and matches every column with v[j] < 0 (the
// potentials of solve satisfy these for its own answer, and any optimal
// dual certifies every optimal primal). So the optimal assignments are the
// row-perfect matchings of the tight graph that cover the required
// columns, and the choices below are feasibility checks on that graph. A
// matching covering all rows and one covering a set of columns imply one
// covering both (Mendelsohn-Dulmage), so each check is two bipartite
// matchings.
func (a *assignment) canonical() {
	n, m := a.n, a.m
	tight := make([]bool, n*m)
	for i := range n {
		for j := range m {
			tight[i*m+j] = a.u[i].add(a.v[j]) == a.c[i*m+j]
		}
	}
	const (
		open = iota
		in
		out
	)
	state := make([]int, m)
	var zero cost
	for j := range m {
		if a.v[j].less(zero) {
			state[j] = in
		}
	}
	mt := newMatcher(n, m)
	feasible := func() bool {
		if mt.rows(func(i, j int) bool { return state[j] != out && tight[i*m+j] }, nil) < n {
			return false
		}
		var need []int
		for j, s := range state {
			if s == in {
				need = append(need, j)
			}
		}
		return mt.cols(need, func(i, j int) bool { return tight[i*m+j] }) == len(need)
	}
	for j := range m {
		if state[j] == in {
			continue
		}
		if !anyTight(tight, j, n, m) {
			state[j] = out // no optimal assignment can use it
			continue
		}
		state[j] = in
		if !feasible() {
			state[j] = out
		}
	}
	// The column set is fixed (exactly n columns are in); now rows in order
	// take their smallest column that leaves a perfect matching of the rest.
	fixed := make([]int, n)
	taken := make([]bool, m)
	for i := range n {
		for j := range m {
			if state[j] != in || taken[j] || !tight[i*m+j] {
				continue
			}
			taken[j] = true
			rest := mt.rows(func(r, c int) bool { return r > i && state[c] == in && !taken[c] && tight[r*m+c] }, nil)
			if rest == n-1-i {
				fixed[i] = j
				break
			}
			taken[j] = false
		}
	}
	a.col = fixed
}

// anyTight says whether column j has a tight edge.
func anyTight(tight []bool, j, n, m int) bool {
	for i := range n {
		if tight[i*m+j] {
			return true
		}
	}
	return false
}

// total is the cost of the current assignment.
func (a *assignment) total() cost {
	var t cost
	for i, j := range a.col {
		t = t.add(a.c[i*a.m+j])
	}
	return t
}

// matcher finds maximum bipartite matchings (Kuhn's augmenting paths) on
// n rows and m columns, reusing its buffers.
type matcher struct {
	n, m        int
	owner, seen []int // owner: column -> row (or row -> column), -1 free
	stamp       int
}

func newMatcher(n, m int) *matcher {
	k := max(n, m)
	return &matcher{n: n, m: m, owner: make([]int, k), seen: make([]int, k)}
}

// rows returns the size of a maximum matching from every row (or the rows
// listed) to columns along edges adj allows.
func (mt *matcher) rows(adj func(i, j int) bool, only []int) int {
	for j := range mt.m {
		mt.owner[j] = -1
	}
	var try func(i int) bool
	try = func(i int) bool {
		for j := range mt.m {
			if mt.seen[j] == mt.stamp || !adj(i, j) {
				continue
			}
			mt.seen[j] = mt.stamp
			if mt.owner[j] < 0 || try(mt.owner[j]) {
				mt.owner[j] = i
				return true
			}
		}
		return false
	}
	count := 0
	visit := func(i int) {
		mt.stamp++
		if try(i) {
			count++
		}
	}
	if only != nil {
		for _, i := range only {
			visit(i)
		}
	} else {
		for i := range mt.n {
			visit(i)
		}
	}
	return count
}

// cols returns the size of a maximum matching from the listed columns to
// rows along edges adj allows.
func (mt *matcher) cols(need []int, adj func(i, j int) bool) int {
	t := &matcher{n: mt.m, m: mt.n, owner: mt.owner, seen: mt.seen, stamp: mt.stamp}
	count := t.rows(func(j, i int) bool { return adj(i, j) }, need)
	mt.stamp = t.stamp
	return count
}
