"""Fitting the cost model's terms: a model linear in their coefficients, the catalogue as a log-normal prior.

    observations  y_i = Σ_j x_ij · θ_j + fixed_i       (seconds; x: the work each term multiplies)
                  each with its standard deviation σ_i  (a share of y_i: the model's own error; or a step's
                                                          scatter about its run's mean)
    terms         θ_j = θ0_j · exp(u_j),  u_j ~ N(0, s_j²) (θ0: the catalogue's coefficient; s: how many
                                                          e-folds it may be off, one sd)
    bounds        u_j ≥ log(low_j / θ0_j)               (a share at most 1: its inverse at least 1)
        ─► the posterior mode of u: Gauss-Newton on the weighted squares plus the prior's, the bounds by
           an active set (a term at its bound is held there)
        ─► its covariance (J'WJ + S⁻¹)⁻¹, J = X · diag(θ): each term's interval, θ · exp(± 1.96 sd)
        ─► identified: a term whose posterior sd fell below IDENTIFIED of its prior sd; the others keep,
           in effect, the catalogue's value and interval

With one log most terms are not identified: its few phase times fix a few combinations of them, and the
prior says how to share a phase's surplus among its terms (by each one's share of the phase and how far
its catalogue value may be off). Several logs of one cluster (other model sizes, GPU counts, lengths)
identify more. Nothing here knows what a term means: ``asyncrl.calibration.fit_log`` builds the observations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: A term counts as identified by the data when its posterior sd is below this share of its prior sd.
IDENTIFIED = 0.7
#: z of a two-sided 95% interval.
Z95 = 1.959964
ITERATIONS = 50
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Prior:
    """A term's coefficient before the data: its catalogue value, its log-sd (e-folds), its lowest value."""

    mean: float
    log_sd: float
    low: float = 0.0


@dataclass(frozen=True)
class Observation:
    """One measured time: the work each term multiplies, what no term scales, the value and its sd."""

    label: str
    work: Mapping[str, float]
    fixed_s: float
    value_s: float
    sd_s: float


@dataclass(frozen=True)
class Posterior:
    """The fitted coefficients, the covariance of their logs, and which terms the data identified."""

    terms: tuple[str, ...]
    mean: np.ndarray  # coefficients at the posterior mode
    log_covariance: np.ndarray  # of log(coefficient)
    prior_log_sd: np.ndarray
    clamped: frozenset[str]
    objective: float = 0.0  # the weighted squares plus the prior's at the mode: lower is likelier

    def value(self, term: str) -> float:
        return float(self.mean[self.terms.index(term)])

    def log_sd(self, term: str) -> float:
        index = self.terms.index(term)
        return float(math.sqrt(max(self.log_covariance[index, index], 0.0)))

    def identified(self, term: str) -> bool:
        return self.log_sd(term) < IDENTIFIED * float(self.prior_log_sd[self.terms.index(term)])

    def interval(self, term: str, low: float = 0.0) -> tuple[float, float]:
        """The coefficient's 95% interval (log-normal), cut at its bound."""
        centre, spread = self.value(term), math.exp(Z95 * self.log_sd(term))
        return max(low, centre / spread), centre * spread

    def predict(self, observation: Observation) -> tuple[float, float]:
        """An observation's fitted value and the sd the terms' uncertainty gives it (to first order)."""
        gradient = np.array([observation.work.get(term, 0.0) for term in self.terms]) * self.mean
        value = observation.fixed_s + float(np.array([observation.work.get(t, 0.0) for t in self.terms]) @ self.mean)
        return value, float(math.sqrt(max(gradient @ self.log_covariance @ gradient, 0.0)))


def fit_terms(priors: Mapping[str, Prior], observations: Sequence[Observation]) -> Posterior:
    """The posterior of the terms' coefficients given the observations (module docstring)."""
    terms = tuple(priors)
    centre = np.array([priors[term].mean for term in terms], dtype=float)
    log_sd = np.array([priors[term].log_sd for term in terms], dtype=float)
    lowest = np.array([_log_bound(priors[term]) for term in terms])
    x = np.array([[item.work.get(term, 0.0) for term in terms] for item in observations], dtype=float)
    x = x.reshape(len(observations), len(terms))
    y = np.array([item.value_s - item.fixed_s for item in observations], dtype=float)
    weight = np.array([1.0 / item.sd_s**2 for item in observations], dtype=float)
    precision = 1.0 / log_sd**2
    u = np.maximum(np.zeros(len(terms)), lowest)
    held: set[int] = {index for index in range(len(terms)) if lowest[index] >= 0.0}
    for _ in range(ITERATIONS):
        theta = centre * np.exp(u)
        jacobian = x * theta
        residual = y - x @ theta
        free = [index for index in range(len(terms)) if index not in held]
        if not free:
            break
        jf = jacobian[:, free]
        hessian = jf.T @ (jf * weight[:, None]) + np.diag(precision[free])
        gradient = jf.T @ (weight * residual) - precision[free] * u[free]
        step = np.linalg.solve(hessian, gradient)
        proposal = u.copy()
        proposal[free] += step
        below = [index for index in free if proposal[index] < lowest[index]]
        if below:  # hold those at their bound, and solve again without them
            u[below] = lowest[below]
            held.update(below)
            continue
        u = proposal
        released = [index for index in held if _pulls_up(index, u, x, y, weight, centre, precision)]
        held.difference_update(released)
        if float(np.max(np.abs(step))) < TOLERANCE and not released:
            break
    theta = centre * np.exp(u)
    jacobian = x * theta
    hessian = jacobian.T @ (jacobian * weight[:, None]) + np.diag(precision)
    objective = float(weight @ (y - x @ theta) ** 2 + precision @ u**2)
    held_terms = frozenset(terms[index] for index in held)
    return Posterior(terms, theta, np.linalg.inv(hessian), log_sd, held_terms, objective)


def _log_bound(prior: Prior) -> float:
    """The lowest log-multiple of the catalogue value the term may take (``-inf`` for none)."""
    return math.log(prior.low / prior.mean) if prior.low > 0 else -math.inf


def _pulls_up(
    index: int,
    u: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray,
    centre: np.ndarray,
    precision: np.ndarray,
) -> bool:
    """Whether a term held at its bound would rise if let go (the objective falls as it rises)."""
    theta = centre * np.exp(u)
    residual = y - x @ theta
    slope = float((x[:, index] * theta[index]) @ (weight * residual)) - precision[index] * u[index]
    return slope > 0
