// The reference for cluster_phones in tests/hmm/test_tree.py: Kaldi's TreeCluster
// (src/tree/cluster-utils.cc, 10 k-means tries as AutomaticallyObtainQuestions sets) on one
// Gaussian's stats per phone set read from a file; prints the phone-set indices of every cluster
// of the tree as build-tree.cc's ObtainSetsOfPhones gathers them (its root stays empty). Built
// like kaldi_build_tree.cc, from this file, src/base and src/tree/cluster-utils.cc; see
// tests/hmm/kaldi_reference.py.
#include <cmath>
#include <algorithm>
#include <iostream>
#include <fstream>
#include "tree/cluster-utils.h"
using namespace kaldi;
namespace kaldi {
BaseFloat Clusterable::ObjfPlus(const Clusterable &o) const { Clusterable *c = Copy(); c->Add(o); BaseFloat a = c->Objf(); delete c; return a; }
BaseFloat Clusterable::ObjfMinus(const Clusterable &o) const { Clusterable *c = Copy(); c->Sub(o); BaseFloat a = c->Objf(); delete c; return a; }
BaseFloat Clusterable::Distance(const Clusterable &o) const { Clusterable *c = Copy(); c->Add(o); BaseFloat a = Objf() + o.Objf() - c->Objf(); delete c; return a < 0 ? 0 : a; }
}
class Gauss : public Clusterable {
 public:
  Gauss(int d, BaseFloat f): count_(0), x_(d, 0.0), x2_(d, 0.0), floor_(f) {}
  Clusterable *Copy() const { return new Gauss(*this); }
  BaseFloat Objf() const {
    if (count_ <= 0) return 0;
    double per = 0, logs = 0;
    for (size_t d = 0; d < x_.size(); d++) {
      double m = x_[d] / count_, v = x2_[d] / count_ - m * m, fv = std::max(v, (double)floor_);
      per += -0.5 * v / fv; logs += std::log(fv);
    }
    per += -0.5 * (logs + M_LOG_2PI * x_.size());
    return per * count_;
  }
  BaseFloat Normalizer() const { return count_; }
  void SetZero() { count_ = 0; std::fill(x_.begin(), x_.end(), 0); std::fill(x2_.begin(), x2_.end(), 0); }
  void Add(const Clusterable &o) { const Gauss &g = static_cast<const Gauss&>(o); count_ += g.count_; for (size_t d = 0; d < x_.size(); d++) { x_[d] += g.x_[d]; x2_[d] += g.x2_[d]; } }
  void Sub(const Clusterable &o) { const Gauss &g = static_cast<const Gauss&>(o); count_ -= g.count_; for (size_t d = 0; d < x_.size(); d++) { x_[d] -= g.x_[d]; x2_[d] -= g.x2_[d]; } }
  std::string Type() const { return "gauss"; }
  void Write(std::ostream &, bool) const {}
  Clusterable *ReadNew(std::istream &, bool) const { return NULL; }
  BaseFloat count_; std::vector<double> x_, x2_; BaseFloat floor_;
};
int main(int argc, char **argv) {
  std::ifstream in(argv[1]);
  int dim, n; in >> dim >> n;
  std::vector<Clusterable*> pts;
  for (int i = 0; i < n; i++) { Gauss *g = new Gauss(dim, 0.01); in >> g->count_; for (int d = 0; d < dim; d++) in >> g->x_[d]; for (int d = 0; d < dim; d++) in >> g->x2_[d]; pts.push_back(g); }
  TreeClusterOptions topts; topts.kmeans_cfg.num_tries = 10;
  std::vector<int32> assignments, clust_assignments; int32 num_leaves;
  TreeCluster(pts, pts.size(), NULL, &assignments, &clust_assignments, &num_leaves, topts);
  std::vector<std::vector<int32> > raw(clust_assignments.size());
  for (size_t i = 0; i < assignments.size(); i++) raw[assignments[i]].push_back(i);
  for (size_t j = 0; j < clust_assignments.size(); j++) {
    int32 parent = clust_assignments[j]; std::sort(raw[j].begin(), raw[j].end());
    if (parent < (int32)clust_assignments.size() - 1) raw[parent].insert(raw[parent].end(), raw[j].begin(), raw[j].end());
  }
  for (size_t j = 0; j < raw.size(); j++) { std::sort(raw[j].begin(), raw[j].end()); for (int32 x : raw[j]) std::cout << x << ' '; std::cout << '\n'; }
}
